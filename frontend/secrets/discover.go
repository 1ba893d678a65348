package secrets

import (
	"fmt"
	"io/fs"
	"slices"
	"sort"
	"strings"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/internal/placeholder"
)

// providerHosts are the hosts that receive a known provider's API key, by variable name.
// The model providers follow netpolicy's agent table (the built-in agents' provider
// hosts); the others are each provider's documented API host.
var providerHosts = map[string][]string{
	"OPENAI_API_KEY":     {"api.openai.com"},
	"CODEX_API_KEY":      {"api.openai.com"},
	"ANTHROPIC_API_KEY":  {"api.anthropic.com"},
	"GEMINI_API_KEY":     {"generativelanguage.googleapis.com"},
	"GOOGLE_API_KEY":     {"generativelanguage.googleapis.com", "aiplatform.googleapis.com"},
	"OPENROUTER_API_KEY": {"openrouter.ai"},
	"NOUS_API_KEY":       {"inference-api.nousresearch.com"},
	"MISTRAL_API_KEY":    {"api.mistral.ai"},
	"GROQ_API_KEY":       {"api.groq.com"},
	"DEEPSEEK_API_KEY":   {"api.deepseek.com"},
	"XAI_API_KEY":        {"api.x.ai"},
	"TOGETHER_API_KEY":   {"api.together.xyz"},
	"HF_TOKEN":           {"huggingface.co"},
	"GH_TOKEN":           {"api.github.com", "github.com"},
	"GITHUB_TOKEN":       {"api.github.com", "github.com"},
}

// credentialSuffixes mark a variable name as a credential.
var credentialSuffixes = []string{"_API_KEY", "_APIKEY", "_TOKEN", "_SECRET", "_PASSWORD", "_SECRET_KEY", "_ACCESS_KEY", "_PAT"}

// IsCredentialName reports whether the variable name looks like it holds a credential:
// a known provider's name (providerHosts) or a name ending in one of credentialSuffixes.
func IsCredentialName(name string) bool {
	if _, ok := providerHosts[name]; ok {
		return true
	}
	for _, s := range credentialSuffixes {
		if strings.HasSuffix(name, s) {
			return true
		}
	}
	return false
}

// Policy is what the system policy says about secrets. Its zero value forbids nothing and
// removes no host.
type Policy struct {
	// ForbidRawEnv refuses raw_env: every credential becomes a placeholder.
	ForbidRawEnv bool
	// ForbidGitToken refuses --git-token.
	ForbidGitToken bool
	// DenyHosts are names (exact, or "*.suffix" for every name under suffix) no secret
	// may be sent to; they are removed from every binding.
	DenyHosts []string
}

// Input is what Discover works from.
type Input struct {
	// Agent is the agent's name; Builtin says whether it is one of brood's (its login
	// file is then read).
	Agent   string
	Builtin bool
	// Forwarded are the variables the agent's patterns forward (name, real value).
	Forwarded [][2]string
	// Home is the developer's home directory (absolute), where login files are read;
	// empty reads none.
	Home string
	// RawEnv names variables that reach the guest as they are (the user config's
	// raw_env), unless Policy.ForbidRawEnv.
	RawEnv []string
	// Hosts are the agent's configured hosts per variable name; they replace the
	// provider's default hosts for that variable.
	Hosts map[string][]string
	// Policy is the system policy's part; it only narrows.
	Policy Policy
}

// File is one file of the guest home: Path relative to $HOME, Mode its permission bits,
// Data its content (placeholders only).
type File struct {
	Path string
	Mode fs.FileMode
	Data []byte
}

// Result is the guest side of a session's secrets and the bindings for the egress process.
type Result struct {
	// Env is Input.Forwarded with every credential value replaced by its placeholder
	// (raw_env ones kept), in the same order.
	Env [][2]string
	// Files are the agent's login files with placeholders, to write into the guest home.
	Files []File
	// Secrets holds the real values and their hosts: for the egress process only.
	Secrets api.SessionSecrets
	// Notes are lines for the run output: each placeholder and where it may go, each
	// raw value, each login file rewritten; never a value.
	Notes []string
	// Raw names the credential variables left raw (RawEnv, allowed by the policy).
	Raw []string
	// Logins are the host login files whose OAuth tokens are placeholders, for the
	// opt-in write-back of refreshed tokens (Login.WriteBack).
	Logins []Login
	// LoginNames name the agent's logins (netpolicy.Login.Name) whose tokens Secrets binds:
	// the session's api.StartVMArgs.Logins, for which the helper allows the login's hosts.
	LoginNames []string
}

// Discover builds the placeholders and bindings of one session from in. It returns an
// error wrapping ErrMalformedLogin, naming the file, when a login file of the agent does
// not parse; a missing login file is not an error.
func Discover(in Input) (Result, error) {
	d := &discovery{in: in}
	for _, kv := range in.Forwarded {
		d.res.Env = append(d.res.Env, [2]string{kv[0], d.variable(kv[0], kv[1])})
	}
	if in.Builtin && in.Home != "" {
		if err := d.login(); err != nil {
			return Result{}, err
		}
	}
	if err := d.res.Secrets.Validate(); err != nil {
		return Result{}, fmt.Errorf("secrets of agent %s: %w", in.Agent, err)
	}
	return d.res, nil
}

// discovery accumulates one Result.
type discovery struct {
	in  Input
	res Result
	// logins are the OAuth logins (SecretBinding.Login) of the login file being read.
	logins []string
}

func (d *discovery) note(format string, args ...any) {
	d.res.Notes = append(d.res.Notes, fmt.Sprintf(format, args...))
}

// variable returns what the guest gets for the forwarded variable name=value.
func (d *discovery) variable(name, value string) string {
	if value == "" || (!IsCredentialName(name) && !placeholder.Known(value)) {
		return value
	}
	if slices.Contains(d.in.RawEnv, name) {
		if !d.in.Policy.ForbidRawEnv {
			d.note("secrets: $%s reaches the VM as it is (raw_env)", name)
			d.res.Raw = append(d.res.Raw, name)
			return value
		}
		d.note("secrets: raw_env %s refused by the system policy; it is a placeholder", name)
	}
	hosts, ok := d.in.Hosts[name]
	if !ok {
		hosts = providerHosts[name]
	}
	return d.bind(api.SecretBinding{Name: "$" + name, Value: value, Hosts: hosts}, placeholder.New(value))
}

// bind adds b with placeholder p, its hosts narrowed by the policy, and returns p. A value
// bound twice (the same key in two variables) keeps one placeholder and the union of
// hosts.
func (d *discovery) bind(b api.SecretBinding, p string) string {
	b.Hosts = d.narrow(b.Hosts)
	for i, o := range d.res.Secrets.Bindings {
		if o.Value == b.Value && o.Role == b.Role && o.Login == b.Login {
			o.Hosts = d.narrow(append(o.Hosts, b.Hosts...))
			d.res.Secrets.Bindings[i] = o
			d.note("secrets: %s is the same value as %s", b.Name, o.Name)
			return o.Placeholder
		}
	}
	b.Placeholder = p
	d.res.Secrets.Bindings = append(d.res.Secrets.Bindings, b)
	if len(b.Hosts) == 0 {
		d.note("secrets: %s is a placeholder bound to no host (name its hosts in the agent's config, or raw_env)", b.Name)
	} else {
		d.note("secrets: %s is a placeholder; the real value goes only to %s", b.Name, strings.Join(b.Hosts, ", "))
	}
	return p
}

// narrow returns hosts lower-cased, sorted, without duplicates and without the names the
// policy denies.
func (d *discovery) narrow(hosts []string) []string {
	var out []string
	for _, h := range hosts {
		h = strings.TrimSuffix(strings.ToLower(h), ".")
		if !denied(h, d.in.Policy.DenyHosts) {
			out = append(out, h)
		}
	}
	sort.Strings(out)
	return slices.Compact(out)
}

// denied reports whether host matches one of patterns (exact, or "*.suffix").
func denied(host string, patterns []string) bool {
	for _, p := range patterns {
		p = strings.ToLower(p)
		if suf, ok := strings.CutPrefix(p, "*."); ok {
			if strings.HasSuffix(host, "."+suf) {
				return true
			}
		} else if host == p {
			return true
		}
	}
	return false
}
