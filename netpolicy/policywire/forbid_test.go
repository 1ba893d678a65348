package policywire

import (
	"testing"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/netpolicy"
)

// TestForbidSecretsKeys: forbid_raw_env, forbid_git_token, forbid_login_write_back and
// allow_ssh_agent = false travel from the system policy file through the effective policy into
// resolve_policy's answer; with forbid_login_write_back, NarrowSecrets clears the
// bindings' WriteBack (the egress process then reports no refreshed value).
func TestForbidSecretsKeys(t *testing.T) {
	for _, on := range []bool{false, true} {
		data := ""
		if on {
			data = "forbid_raw_env = true\nforbid_git_token = true\nforbid_login_write_back = true\nallow_ssh_agent = false\n"
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
		if p.SSHAgentForbidden != on {
			t.Errorf("policy %q: ssh agent forbidden %v", data, p.SSHAgentForbidden)
		}
		if p.RawEnvForbidden != on || p.GitTokenForbidden != on || p.LoginWriteBackForbidden != on {
			t.Fatalf("policy %q: raw_env forbidden %v, git token forbidden %v, login write-back forbidden %v", data, p.RawEnvForbidden, p.GitTokenForbidden, p.LoginWriteBackForbidden)
		}
		for _, asked := range []bool{false, true} {
			out, _ := NarrowSecrets(eff, api.SessionSecrets{WriteBack: asked})
			if out.WriteBack != (asked && !on) {
				t.Errorf("policy %q: write-back asked %v, narrowed %v", data, asked, out.WriteBack)
			}
		}
	}
}
