package main

import (
	"bufio"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// hardening are the [Service] directives of broodd-helper.service that confine the helper,
// with their exact values. Dropping or weakening one fails TestUnitHardening; a directive
// may only leave this list together with the reason in the unit's comments.
var hardening = map[string][]string{
	"NoNewPrivileges":         {"yes"},
	"ProtectSystem":           {"strict"},
	"ProtectHome":             {"read-only"},
	"PrivateTmp":              {"yes"},
	"StateDirectory":          {"brood"},
	"ReadWritePaths":          {"-/run/brood"},
	"DevicePolicy":            {"closed"},
	"DeviceAllow":             {"/dev/kvm rw", "/dev/net/tun rw"},
	"ProtectKernelModules":    {"yes"},
	"ProtectKernelLogs":       {"yes"},
	"ProtectControlGroups":    {"yes"},
	"ProtectClock":            {"yes"},
	"ProtectHostname":         {"yes"},
	"RestrictSUIDSGID":        {"yes"},
	"RestrictRealtime":        {"yes"},
	"LockPersonality":         {"yes"},
	"RestrictAddressFamilies": {"AF_UNIX AF_NETLINK AF_INET AF_INET6"},
	"SystemCallArchitectures": {"native"},
	"UMask":                   {"0077"},
	"AmbientCapabilities":     {""},
	"LimitMEMLOCK":            {"8M"},
}

// capabilityTests names, for each capability in CapabilityBoundingSet, the test that
// fails without it (run under the packaged unit in TestInstalledUnderSystemd, or the
// helper's own tests of that operation). A capability added to the unit without an entry
// here fails TestUnitHardening.
var capabilityTests = map[string]string{
	"CAP_NET_ADMIN":        "TestInstalledUnderSystemd (egress session: tap, nft table); helper TestVMEgress",
	"CAP_SETUID":           "TestInstalledUnderSystemd (VM session: the runner runs as the user)",
	"CAP_SETGID":           "TestInstalledUnderSystemd (VM session: the runner's groups)",
	"CAP_KILL":             "TestInstalledUnderSystemd (remove: orphaned runners are killed); helper cleanup tests",
	"CAP_CHOWN":            "TestInstalledUnderSystemd (VM session: per-session run dir handed to the user)",
	"CAP_NET_BIND_SERVICE": "TestInstalledUnderSystemd (egress session: the DNS proxy on port 53)",
}

// unitDirectives parses the [Service] section of a unit file into directive -> values in
// order (a repeated directive appends).
func unitDirectives(t *testing.T, path string) map[string][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]string{}
	section := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "["):
			section = line
		case section == "[Service]":
			k, v, _ := strings.Cut(line, "=")
			out[k] = append(out[k], v)
		}
	}
	return out
}

// TestUnitHardening: every hardening directive is in broodd-helper.service with its value,
// and the capability bounding set holds exactly the capabilities capabilityTests names.
func TestUnitHardening(t *testing.T) {
	d := unitDirectives(t, "../systemd/broodd-helper.service")
	for k, want := range hardening {
		if got := d[k]; !slices.Equal(got, want) {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	caps := strings.Fields(strings.Join(d["CapabilityBoundingSet"], " "))
	for _, c := range caps {
		if _, ok := capabilityTests[c]; !ok {
			t.Errorf("CapabilityBoundingSet has %s, which no test needs (add the test to capabilityTests)", c)
		}
	}
	for c := range capabilityTests {
		if !slices.Contains(caps, c) {
			t.Errorf("CapabilityBoundingSet lacks %s (needed by %s)", c, capabilityTests[c])
		}
	}
	for _, k := range []string{"ExecStart", "ExecStopPost"} {
		if v := d[k]; len(v) != 1 || !strings.HasPrefix(v[0], "/usr/sbin/broodd-helper") {
			t.Errorf("%s = %q, want the packaged /usr/sbin/broodd-helper", k, v)
		}
	}
}

// TestUnitHardeningCatchesDrops proves TestUnitHardening's parse sees a dropped directive
// and an added capability.
func TestUnitHardeningCatchesDrops(t *testing.T) {
	data, err := os.ReadFile("../systemd/broodd-helper.service")
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(data), "\nNoNewPrivileges=yes\n", "\n", 1)
	s = strings.Replace(s, " CAP_NET_BIND_SERVICE\n", " CAP_NET_BIND_SERVICE CAP_SYS_ADMIN\n", 1)
	p := filepath.Join(t.TempDir(), "broodd-helper.service")
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	d := unitDirectives(t, p)
	if _, ok := d["NoNewPrivileges"]; ok {
		t.Error("the dropped NoNewPrivileges was still parsed")
	}
	if !strings.Contains(strings.Join(d["CapabilityBoundingSet"], " "), "CAP_SYS_ADMIN") {
		t.Error("the added CAP_SYS_ADMIN was not parsed")
	}
}
