package helper

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"brood.dev/brood/helper/egress"
	"brood.dev/brood/netpolicy"
)

func TestEgressConfigTOML(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "helper.toml")
	os.WriteFile(p, []byte("[egress]\npool_v4 = \"10.99.0.0/24\"\nupstream = \"192.0.2.53:5353\"\n[egress.agents]\nmine = [\"llm.corp.example\"]\n"), 0o644)
	cfg, err := LoadConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(func(string) {}); err != nil {
		t.Fatal(err)
	}
	if cfg.Egress.PoolV4 != "10.99.0.0/24" || cfg.Egress.PoolV6 != egress.DefaultConfig().PoolV6 || cfg.Egress.PolicyPath != netpolicy.SystemPolicyPath {
		t.Errorf("egress config = %+v", cfg.Egress)
	}
	if got := egress.UpstreamTCPPort(cfg.Egress.Upstream); got != 5353 {
		t.Errorf("upstream TCP port = %d, want 5353 (Landlock connect rule)", got)
	}
	hosts, err := cfg.Egress.AgentHosts("mine")
	if err != nil || len(hosts) != 1 || hosts[0].String() != "llm.corp.example" {
		t.Errorf("agent hosts = %v, %v", hosts, err)
	}
	for _, bad := range []string{"[egress]\npool_v4 = \"10.99.0.0/31\"\n", "[egress]\npolicy_path = \"rel.toml\"\n", "[egress.agents]\nx = [\"*bad\"]\n",
		"[egress.agents]\nx = [\"*.googleapis.com\"]\n", "[egress.agents]\nx = [\"169.254.169.254\"]\n", "[egress.agents]\nx = [\"[fd00:ec2::254]:443\"]\n"} {
		os.WriteFile(p, []byte(bad), 0o644)
		cfg, err := LoadConfig(p)
		if err == nil {
			err = cfg.Validate(func(string) {})
		}
		if !errors.Is(err, ErrConfig) {
			t.Errorf("config %q: %v, want ErrConfig", bad, err)
		}
	}
}
