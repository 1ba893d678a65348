package frontend

import (
	"slices"
	"testing"

	"brood.dev/brood/helper/api"
)

// TestCodeHostsSSH: the names of the allowed entries with TCP 22, wildcards left out.
func TestCodeHostsSSH(t *testing.T) {
	eg := &api.EgressInfo{Hosts: []string{"*.example.com (22/tcp)", "bitbucket.org (22/tcp, 443/tcp)", "github.com (443/tcp, 22/tcp)",
		"pypi.org (443/tcp)", "git.corp.example (2222/tcp)", "x22.example (443/tcp)"}}
	if got := CodeHostsSSH(eg); !slices.Equal(got, []string{"bitbucket.org", "github.com"}) {
		t.Errorf("CodeHostsSSH = %v", got)
	}
	if CodeHostsSSH(nil) != nil {
		t.Error("no network, code hosts")
	}
}
