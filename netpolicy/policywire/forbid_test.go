package policywire

import (
	"testing"

	"brood.dev/brood/netpolicy"
)

// TestForbidSecretsKeys: forbid_raw_env and forbid_git_token travel from the system
// policy file through the effective policy into resolve_policy's answer.
func TestForbidSecretsKeys(t *testing.T) {
	for _, on := range []bool{false, true} {
		data := ""
		if on {
			data = "forbid_raw_env = true\nforbid_git_token = true\n"
		}
		sys, err := netpolicy.ParseSystemPolicy([]byte(data))
		if err != nil {
			t.Fatal(err)
		}
		eff, err := netpolicy.Resolve(netpolicy.Inputs{System: sys})
		if err != nil {
			t.Fatal(err)
		}
		p := Render(eff, "")
		if p.RawEnvForbidden != on || p.GitTokenForbidden != on {
			t.Fatalf("policy %q: raw_env forbidden %v, git token forbidden %v", data, p.RawEnvForbidden, p.GitTokenForbidden)
		}
	}
}
