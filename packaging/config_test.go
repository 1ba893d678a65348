package main

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"brood.dev/brood/helper"
	"brood.dev/brood/netpolicy"
)

// settingLine is a commented-out setting in a shipped config file ("#key = value" or
// "#[table]"); "##" lines are prose.
var settingLine = regexp.MustCompile(`(?m)^#([a-z_\[][^\n]*)$`)

// uncomment returns data with every commented-out setting line made live.
func uncomment(data []byte) []byte { return settingLine.ReplaceAll(data, []byte("$1")) }

func readShipped(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("files", name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestShippedHelperConfig: /etc/brood/helper.toml as shipped parses strictly (unknown keys
// are errors in helper.LoadConfig) to the built-in defaults, and so does the file with
// every commented-out line made live: the comments show the real defaults and real keys.
func TestShippedHelperConfig(t *testing.T) {
	data := readShipped(t, "helper.toml")
	live := uncomment(data)
	if n := len(settingLine.FindAll(data, -1)); n < 15 {
		t.Fatalf("helper.toml has %d commented-out settings, want every key of helper.Config (>= 15)", n)
	}
	opts := cmp.Options{cmpopts.IgnoreUnexported(helper.Config{}), cmpopts.EquateEmpty()}
	for name, content := range map[string][]byte{"as shipped": data, "uncommented": live} {
		p := filepath.Join(t.TempDir(), "helper.toml")
		if err := os.WriteFile(p, content, 0o644); err != nil {
			t.Fatal(err)
		}
		cfg, err := helper.LoadConfig(p)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if diff := cmp.Diff(helper.DefaultConfig(), cfg, opts); diff != "" {
			t.Errorf("%s: differs from helper.DefaultConfig() (-default +file):\n%s", name, diff)
		}
		if err := cfg.Validate(func(string) {}); err != nil {
			t.Errorf("%s: Validate: %v", name, err)
		}
	}
}

// TestShippedPolicy: /etc/brood/policy.toml as shipped parses strictly and sets nothing
// (no cap, no hosts, default code hosts), and its commented-out examples are valid keys
// and values.
func TestShippedPolicy(t *testing.T) {
	data := readShipped(t, "policy.toml")
	sp, err := netpolicy.ParseSystemPolicy(data)
	if err != nil {
		t.Fatalf("as shipped: %v", err)
	}
	if sp.MaxProfile != nil || sp.ForbidAllowHost || len(sp.Allow) > 0 || len(sp.Deny) > 0 || sp.CodeHosts != nil {
		t.Errorf("as shipped the policy sets something: %+v", sp)
	}
	ex, err := netpolicy.ParseSystemPolicy(uncomment(data))
	if err != nil {
		t.Fatalf("uncommented examples: %v", err)
	}
	if ex.MaxProfile == nil || ex.DefaultProfile == nil || len(ex.Allow) == 0 || len(ex.Deny) == 0 || ex.CodeHosts == nil {
		t.Errorf("uncommented examples set too little (a line no longer matches settingLine?): %+v", ex)
	}
}

// TestShippedPolicyNamesEveryKey: every key netpolicy.SystemPolicyFile accepts (its toml
// tags) appears in the shipped policy.toml, as a commented-out setting or a table named in
// prose ("[[host]]", "[images]"), so the template cannot fall behind the parser.
func TestShippedPolicyNamesEveryKey(t *testing.T) {
	data := string(readShipped(t, "policy.toml"))
	typ := reflect.TypeFor[netpolicy.SystemPolicyFile]()
	for i := range typ.NumField() {
		key, _, _ := strings.Cut(typ.Field(i).Tag.Get("toml"), ",")
		if key == "" {
			t.Fatalf("field %s has no toml key", typ.Field(i).Name)
		}
		if !strings.Contains(data, "\n#"+key+" = ") && !strings.Contains(data, "[["+key+"]]") && !strings.Contains(data, "["+key+"]") {
			t.Errorf("policy.toml does not name %q", key)
		}
	}
}

// TestUncommentSeesTypos proves the strict parse can fail: a misspelled key in a
// commented-out line is an error once uncommented.
func TestUncommentSeesTypos(t *testing.T) {
	bad := append(readShipped(t, "policy.toml"), "#deny_host = [\"x.example\"]\n"...)
	if _, err := netpolicy.ParseSystemPolicy(uncomment(bad)); err == nil {
		t.Error("a misspelled key (deny_host) parsed")
	}
}
