package frontend

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"brood.dev/brood/internal/testenv"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/sandbox/guestcfg"
)

const (
	canaryReal = "sk-proj-CANARYREAL" + "0123456789abcdefghijklmnopqrstuvwxyz"
	canaryPH   = "sk-proj-placeholder" + "0123456789abcdefghijklmnopqrstuvwxy"
)

func placeholderSpec(ws string) RunSpec {
	return RunSpec{Agent: "codex", Describe: "agent codex", Workspace: ws,
		VM: api.StartVMArgs{Image: "test", TimeoutSec: 60}, Command: "exec codex",
		Env:       [][2]string{{"OPENAI_API_KEY", canaryReal}},
		HomeFiles: []guestcfg.HomeFile{{Path: ".codex/auth.json", Mode: 0o600, Data: []byte(`{"OPENAI_API_KEY":"` + canaryReal + `"}`)}},
		Placeholders: &Placeholders{
			Env:       [][2]string{{"OPENAI_API_KEY", canaryPH}},
			HomeFiles: []guestcfg.HomeFile{{Path: ".codex/auth.json", Mode: 0o600, Data: []byte(`{"OPENAI_API_KEY":"` + canaryPH + `"}`)}},
			Secrets: api.SessionSecrets{Bindings: []api.SecretBinding{{Name: "$OPENAI_API_KEY", Placeholder: canaryPH,
				Value: canaryReal, Hosts: []string{"api.openai.com"}}}},
		}}
}

// TestRunWithPlaceholders: with a helper that swaps placeholders, the guest gets only the
// placeholders and the session CA (with the variables pointing at it), the real value
// travels only in StartVM's bindings, and nothing in the session directory holds it.
func TestRunWithPlaceholders(t *testing.T) {
	r := newRig(t)
	r.fake.Caps.Secrets = true
	r.fake.SecretsCA = testenv.CAPEM(t)
	var out, errb bytes.Buffer
	res, err := r.wf.Run(t.Context(), placeholderSpec(r.ws), Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
	if err != nil {
		t.Fatalf("run: %v\n%s", err, r.prog)
	}
	got := r.fake.StartArgs().Secrets
	if got == nil || len(got.Bindings) != 1 || got.Bindings[0].Value != canaryReal {
		t.Fatalf("StartVM secrets %+v", got)
	}
	env := strings.Join(r.fake.Env(), "\n")
	if strings.Contains(env, canaryReal) || !strings.Contains(env, "OPENAI_API_KEY="+canaryPH) ||
		!strings.Contains(env, "SSL_CERT_FILE="+guestcfg.SystemBundle) || !strings.Contains(env, "NODE_EXTRA_CA_CERTS="+guestcfg.SessionCAFile) {
		t.Fatalf("guest env:\n%s", env)
	}
	for _, f := range r.fake.HomeFiles() {
		if bytes.Contains(f.Data, []byte(canaryReal)) {
			t.Fatalf("home file %s holds the real value", f.Path)
		}
	}
	if cas := r.fake.TrustedCAs(); len(cas) != 1 || string(cas[0]) != r.fake.SecretsCA {
		t.Fatalf("trusted CAs %d", len(cas))
	}
	if len(grepTree(t, res.Session.Dir, "changed by the agent")) == 0 {
		t.Fatal("the walk does not read the session directory (the agent wrote README.md in the snapshot)")
	}
	if found := grepTree(t, res.Session.Dir, canaryReal); len(found) != 0 {
		t.Fatalf("the real value is in the session directory: %v", found)
	}
	if found := grepTree(t, os.Getenv("BROOD_STATE_DIR"), canaryReal); len(found) != 0 {
		t.Fatalf("the real value is in brood's state directory: %v", found)
	}
	if strings.Contains(r.prog.String()+out.String()+errb.String(), canaryReal) {
		t.Fatal("the run output names the real value")
	}
}

// TestRunWithoutSecretsHelper: a helper that does not swap placeholders gets no bindings
// and the guest the real values, as before, with a note saying so.
func TestRunWithoutSecretsHelper(t *testing.T) {
	r := newRig(t)
	var out, errb bytes.Buffer
	if _, err := r.wf.Run(t.Context(), placeholderSpec(r.ws), Stdio{In: strings.NewReader(""), Out: &out, Err: &errb}); err != nil {
		t.Fatalf("run: %v", err)
	}
	if r.fake.StartArgs().Secrets != nil || len(r.fake.TrustedCAs()) != 0 {
		t.Fatal("bindings or a CA went to a helper that does not swap")
	}
	if !slices.Contains(r.fake.Env(), "OPENAI_API_KEY="+canaryReal) {
		t.Fatalf("guest env %v", r.fake.Env())
	}
	if !strings.Contains(r.prog.String(), "does not swap placeholders yet") {
		t.Fatalf("no note:\n%s", r.prog)
	}
}

// grepTree returns the files under dir whose content holds s.
func grepTree(t *testing.T, dir, s string) []string {
	t.Helper()
	var found []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, []byte(s)) {
			found = append(found, p)
		}
		return nil
	})
	return found
}

// TestWithSecretsErrors: a failure to make the placeholders stops only a run that would
// use them; an option that needs them stops a run with a helper that cannot swap.
func TestWithSecretsErrors(t *testing.T) {
	bad := errors.New("malformed login file")
	spec := RunSpec{Placeholders: &Placeholders{Err: bad}}
	if _, err := spec.withSecrets(api.Capabilities{}, noProgress{}); err != nil {
		t.Fatalf("unused placeholders failed the run: %v", err)
	}
	if _, err := spec.withSecrets(api.Capabilities{Secrets: true}, noProgress{}); !errors.Is(err, bad) {
		t.Fatalf("used placeholders: %v", err)
	}
	spec = placeholderSpec(t.TempDir())
	spec.Placeholders.Required = "--git-token"
	if _, err := spec.withSecrets(api.Capabilities{}, noProgress{}); !errors.Is(err, ErrSecretsUnsupported) {
		t.Fatalf("required: %v", err)
	}
}
