package netpolicy

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
)

// Profile is an egress profile. Profiles are ordered from tightest to loosest; the zero
// value is Locked.
type Profile uint8

// The egress profiles, in order from tightest (the zero value) to loosest.
const (
	// Locked allows the agent's LLM provider hosts only (plus hosts the system policy adds
	// and, unless forbidden, hosts the user adds).
	Locked Profile = iota
	// Standard adds code hosting and the package registries the host is configured to use.
	Standard
	// Permissive allows every public name and address on any port; the always-refused ranges
	// and denied names stay refused, and DNS still goes through the proxy.
	Permissive
)

// ParseProfile parses "locked", "standard" or "permissive" (case-insensitive).
func ParseProfile(s string) (Profile, error) {
	switch strings.ToLower(s) {
	case "locked":
		return Locked, nil
	case "standard":
		return Standard, nil
	case "permissive":
		return Permissive, nil
	}
	return Locked, fmt.Errorf("parse profile %q: %w", s, ErrBadProfile)
}

func (p Profile) String() string {
	switch p {
	case Locked:
		return "locked"
	case Standard:
		return "standard"
	case Permissive:
		return "permissive"
	}
	return fmt.Sprintf("profile(%d)", uint8(p))
}

// Layer names where an effective value came from, for `brood policy show`.
type Layer string

// Layers, from most to least authoritative, and the non-configuration sources of hosts.
const (
	LayerDefault    Layer = "default"    // built-in default
	LayerSystem     Layer = "system"     // /etc/brood/policy.toml
	LayerUser       Layer = "user"       // the user's config file
	LayerWorkspace  Layer = "workspace"  // the workspace's .brood.toml
	LayerFlags      Layer = "flags"      // brood run --egress / --allow-host
	LayerAgent      Layer = "agent"      // the agent definition's LLM provider hosts
	LayerDiscovered Layer = "discovered" // registries found in the host's tool configuration
)

// LayerConfig is the parsed egress part of one configuration layer (user, workspace or
// flags). The zero value changes nothing.
type LayerConfig struct {
	// Profile, when non-nil, selects a profile; it may not exceed what the layers above allow.
	Profile *Profile
	// Allow adds hosts (refused for the workspace layer and when the system forbids it).
	Allow []Entry
	// Deny refuses names, removing the allowed entries it covers.
	Deny []Pattern
}

// Source says which layer put a host into the effective policy, and how.
type Source struct {
	Layer Layer
	// Detail: the agent name, "tool: file or command" for discovered registries, or empty.
	Detail string
}

func (s Source) String() string {
	if s.Detail == "" {
		return string(s.Layer)
	}
	return string(s.Layer) + " (" + s.Detail + ")"
}

// Grant is one allowed host entry of the effective policy.
type Grant struct {
	Entry  Entry
	Source Source
}

// Denial is one denied pattern of the effective policy.
type Denial struct {
	Pattern Pattern
	Layer   Layer
}

// Note records a host that was left out of the effective policy and why.
type Note struct {
	What string
	Why  string
}

// Effective is a session's resolved egress policy. The zero value refuses every name.
type Effective struct {
	Profile      Profile
	ProfileLayer Layer
	// ProfileSource details how ProfileLayer chose the profile when no configuration
	// layer did: ProfileBuiltin, ProfileFromDefault or ProfileFromCap; empty when a
	// layer (user, workspace, flags) set it.
	ProfileSource string
	// Hosts lists the allowed entries, in the order they were added, one per pattern.
	Hosts []Grant
	// Denied names are refused even when an entry (or Permissive) would allow them.
	Denied             []Denial
	AllowHostForbidden bool
	// DirectForbidden: the system policy forbids direct mode (SystemPolicy.ForbidDirect).
	DirectForbidden bool
	// RawEnvForbidden and GitTokenForbidden: SystemPolicy.ForbidRawEnv, ForbidGitToken.
	RawEnvForbidden, GitTokenForbidden bool
	// LoginWriteBackForbidden: SystemPolicy.ForbidLoginWriteBack.
	LoginWriteBackForbidden bool
	// SSHAgentForbidden: SystemPolicy.ForbidSSHAgent (allow_ssh_agent = false).
	SSHAgentForbidden bool
	// Dropped lists entries left out (covered by a denial, user-controlled discoveries when
	// the system forbids adding hosts).
	Dropped []Note
}

// Inputs are everything Resolve merges. Nil System means no system policy file exists.
//
// Where the result is enforced (the helper), Inputs must come from sources it trusts or
// that can only tighten: System from LoadSystemPolicy, AgentHosts from the helper's own
// agent table (a client could otherwise name any host as its "provider"), Discovered from
// Discoverer{SystemOnly: true} plus client discoveries marked UserControlled; the user,
// workspace and flag layers may come from the client.
type Inputs struct {
	System    *SystemPolicy
	User      LayerConfig
	Workspace LayerConfig
	Flags     LayerConfig
	// Agent names the agent whose LLM provider hosts AgentHosts are.
	Agent      string
	AgentHosts []Entry
	// Discovered registries; used by Standard and Permissive only.
	Discovered []Discovered
}

// codeHosts are the code hosting names Standard allows when the system policy does not set
// code_hosts: exact names only, since "*.githubusercontent.com" (a private-section public
// suffix) would be every GitHub user's uploads, not GitHub's service. Hosts that serve git
// get SSH (TCP 22) as well as HTTPS.
var codeHosts = []struct {
	name  string
	ports []string
}{
	{"github.com", []string{"443", "22"}},                     // git over HTTPS and SSH; release and archive URLs redirect from here
	{"codeload.github.com", []string{"443"}},                  // /archive/ tarballs and zipballs: npm/yarn/pnpm "github:" deps, pip and cargo archive URLs
	{"raw.githubusercontent.com", []string{"443"}},            // raw files: install scripts, Homebrew, nvm, pre-commit and go.mod-less fetches
	{"objects.githubusercontent.com", []string{"443"}},        // release asset downloads (redirect target of /releases/download/)
	{"release-assets.githubusercontent.com", []string{"443"}}, // release asset downloads (the newer redirect target)
	{"media.githubusercontent.com", []string{"443"}},          // Git LFS files fetched through raw URLs
	{"github-cloud.githubusercontent.com", []string{"443"}},   // Git LFS objects (hrefs of the LFS batch API)
	{"gitlab.com", []string{"443", "22"}},                     // git over HTTPS and SSH, raw files and archives under the same name
	{"bitbucket.org", []string{"443", "22"}},                  // git over HTTPS and SSH
	{"codeberg.org", []string{"443", "22"}},                   // git over HTTPS and SSH
}

// DefaultCodeHosts are the code hosting services Standard allows when the system policy
// does not set code_hosts (codeHosts): HTTPS, and git over SSH (TCP 22) where a host
// serves git. api.github.com is not one: it is GitHub's REST API, which neither git nor
// the package managers need.
func DefaultCodeHosts() []Entry {
	var out []Entry
	for _, h := range codeHosts {
		e, err := ParseEntry(h.name, h.ports...)
		if err != nil {
			panic(err) // constant input
		}
		out = append(out, e)
	}
	return out
}

// Resolve merges the layers tighten-only: system ≥ user ≥ workspace ≥ flags.
//
// Profile: the system's max_profile caps it (default: no cap); each layer that sets a
// profile may not exceed the system cap nor a profile set by a layer above (ErrLoosen);
// with none set it is the system's default_profile, else Standard, or the cap if that is
// tighter (Effective.ProfileSource says which).
// Hosts: agent hosts and system-added hosts always; code hosts and discovered registries
// from Standard up; user and --allow-host hosts unless the system forbids adding hosts
// (ErrAllowHostForbidden); a workspace may not add hosts (ErrLoosen). Every layer's denials
// apply to all hosts, and a denied name is refused even under Permissive.
// Every host passes grantable: a wildcard over a private-section public suffix
// ("*.github.io") is accepted from the system policy only, and is an error
// (ErrPublicSuffix) from any other layer, or a dropped entry for a discovered registry.
func Resolve(in Inputs) (*Effective, error) {
	sys := in.System
	if sys == nil {
		sys = &SystemPolicy{}
	}
	eff := &Effective{AllowHostForbidden: sys.ForbidAllowHost, DirectForbidden: sys.ForbidDirect,
		RawEnvForbidden: sys.ForbidRawEnv, GitTokenForbidden: sys.ForbidGitToken, LoginWriteBackForbidden: sys.ForbidLoginWriteBack,
		SSHAgentForbidden: sys.ForbidSSHAgent}
	if err := eff.resolveProfile(sys, in); err != nil {
		return nil, err
	}

	if len(in.Workspace.Allow) > 0 {
		return nil, fmt.Errorf("workspace adds host %s: %w", in.Workspace.Allow[0], ErrLoosen)
	}
	if sys.ForbidAllowHost {
		if len(in.User.Allow) > 0 {
			return nil, fmt.Errorf("user config adds host %s: %w", in.User.Allow[0], ErrAllowHostForbidden)
		}
		if len(in.Flags.Allow) > 0 {
			return nil, fmt.Errorf("--allow-host %s: %w", in.Flags.Allow[0], ErrAllowHostForbidden)
		}
	}

	for _, d := range sys.Deny {
		eff.Denied = append(eff.Denied, Denial{d, LayerSystem})
	}
	for _, l := range []struct {
		layer Layer
		cfg   LayerConfig
	}{{LayerUser, in.User}, {LayerWorkspace, in.Workspace}, {LayerFlags, in.Flags}} {
		for _, d := range l.cfg.Deny {
			eff.Denied = append(eff.Denied, Denial{d, l.layer})
		}
	}
	for _, d := range eff.Denied {
		if _, err := ParsePattern(d.Pattern.String()); err != nil {
			return nil, fmt.Errorf("%s denial: %w", d.Layer, err)
		}
	}
	if err := eff.addHosts(sys, in); err != nil {
		return nil, err
	}
	return eff, nil
}

// The sources of a profile no configuration layer set (Effective.ProfileSource).
const (
	ProfileBuiltin     = "built-in default" // Standard: no system policy default_profile
	ProfileFromDefault = "default_profile"  // the system policy's default_profile
	ProfileFromCap     = "max_profile"      // the default capped by the system policy's max_profile
)

// resolveProfile sets eff's profile and the layer that chose it (see Resolve).
func (eff *Effective) resolveProfile(sys *SystemPolicy, in Inputs) error {
	limit, limitLayer := Permissive, LayerDefault
	if sys.MaxProfile != nil {
		limit, limitLayer = *sys.MaxProfile, LayerSystem
	}
	eff.Profile, eff.ProfileLayer, eff.ProfileSource = Standard, LayerDefault, ProfileBuiltin
	if sys.DefaultProfile != nil {
		eff.Profile, eff.ProfileLayer, eff.ProfileSource = *sys.DefaultProfile, LayerSystem, ProfileFromDefault
	}
	if limit < eff.Profile {
		eff.Profile, eff.ProfileLayer, eff.ProfileSource = limit, LayerSystem, ProfileFromCap
	}
	for _, l := range []struct {
		layer Layer
		cfg   LayerConfig
	}{{LayerUser, in.User}, {LayerWorkspace, in.Workspace}, {LayerFlags, in.Flags}} {
		if l.cfg.Profile == nil {
			continue
		}
		p := *l.cfg.Profile
		if p > limit {
			return fmt.Errorf("%s profile %s above %s set by %s: %w", l.layer, p, limit, limitLayer, ErrLoosen)
		}
		limit, limitLayer = p, l.layer
		eff.Profile, eff.ProfileLayer, eff.ProfileSource = p, l.layer, ""
	}
	return nil
}

// addHosts adds the hosts of every layer, in order: agent, system, code hosts and
// discovered registries (Standard and up), user, flags.
func (eff *Effective) addHosts(sys *SystemPolicy, in Inputs) error {
	for _, e := range in.AgentHosts {
		if err := eff.add(e, Source{LayerAgent, in.Agent}); err != nil {
			return err
		}
	}
	for _, e := range sys.Allow {
		if err := eff.add(e, Source{Layer: LayerSystem}); err != nil {
			return err
		}
	}
	if eff.Profile >= Standard {
		code, codeLayer := sys.CodeHosts, LayerSystem
		if code == nil {
			code, codeLayer = DefaultCodeHosts(), LayerDefault
		}
		for _, e := range code {
			if err := eff.add(e, Source{codeLayer, "code hosting"}); err != nil {
				return err
			}
		}
		for _, d := range in.Discovered {
			if sys.ForbidAllowHost && d.UserControlled {
				eff.Dropped = append(eff.Dropped, Note{d.Entry.String(), "discovered in user-controlled " + d.From + " while the system forbids adding hosts"})
				continue
			}
			if err := eff.add(d.Entry, Source{LayerDiscovered, d.Tool + ": " + d.From}); err != nil {
				eff.Dropped = append(eff.Dropped, Note{d.Entry.String(), err.Error()})
			}
		}
	}
	for _, l := range []struct {
		layer Layer
		cfg   LayerConfig
	}{{LayerUser, in.User}, {LayerFlags, in.Flags}} {
		for _, e := range l.cfg.Allow {
			if err := eff.add(e, Source{Layer: l.layer}); err != nil {
				return err
			}
		}
	}
	return nil
}

// grantable checks that the layer of src may allow p: p must parse as a pattern (no IP
// literal, no wildcard over a top-level domain or ICANN public suffix, whoever built it),
// must not be under a special-use domain (specialUseNames, ErrSpecialUse),
// and a wildcard over a private-section public suffix is the system policy's to allow
// (suffixRules). Errors name the source, the pattern and the suffix, and wrap
// ErrBadPattern.
func grantable(p Pattern, src Source) error {
	if _, err := ParsePattern(p.String()); err != nil {
		return fmt.Errorf("host from %s: %w", src, err)
	}
	if d, ok := specialUse(p.Name); ok {
		return fmt.Errorf("host %s from %s: %q is %s: %w", p, src, d.Domain, d.What, ErrSpecialUse)
	}
	if !p.Wildcard {
		return nil
	}
	if r := suffixRules[classifySuffix(p.Name)]; r.SystemOnly && src.Layer != LayerSystem {
		return fmt.Errorf("host %s from %s: suffix %q is %s; only the system policy may allow it: %w", p, src, p.Name, r.What, ErrPublicSuffix)
	}
	return nil
}

// CheckGrant is Resolve's check that src may allow e (see grantable), for configuration
// validated before any session resolves it, e.g. the helper's agent table.
func CheckGrant(e Entry, src Source) error { return grantable(e.Pattern, src) }

// add appends e unless a denial covers it; an entry for a pattern already present only adds
// its ports. It fails, adding nothing, when src may not allow e (grantable).
func (eff *Effective) add(e Entry, src Source) error {
	if err := grantable(e.Pattern, src); err != nil {
		return err
	}
	for _, d := range eff.Denied {
		if d.Pattern.Covers(e.Pattern) {
			eff.Dropped = append(eff.Dropped, Note{e.String() + " from " + src.String(), "denied by " + string(d.Layer) + " pattern " + d.Pattern.String()})
			return nil
		}
	}
	for i := range eff.Hosts {
		if eff.Hosts[i].Entry.Pattern == e.Pattern {
			h := &eff.Hosts[i].Entry
			h.Ports = normPorts(append(slices.Clone(h.EffectivePorts()), e.EffectivePorts()...))
			return nil
		}
	}
	e.Ports = slices.Clone(e.EffectivePorts())
	eff.Hosts = append(eff.Hosts, Grant{Entry: e, Source: src})
	return nil
}

// Check decides a DNS name: the grant that allows it, or the reason it is refused. Names
// that are not valid host names are refused. Under Permissive every valid name that is not
// denied is allowed (the returned Grant then has an exact pattern for name and no ports).
func (eff *Effective) Check(name string) (Grant, string, bool) {
	if eff == nil {
		return Grant{}, "no policy", false
	}
	n, err := CanonicalName(name)
	if err != nil {
		return Grant{}, "not a host name", false
	}
	for _, d := range eff.Denied {
		if d.Pattern.matchCanonical(n) {
			return Grant{}, "denied by " + string(d.Layer) + " pattern " + d.Pattern.String(), false
		}
	}
	for _, g := range eff.Hosts {
		if g.Entry.Pattern.matchCanonical(n) {
			return g, "", true
		}
	}
	if eff.Profile == Permissive {
		return Grant{Entry: Entry{Pattern: Pattern{Name: n}}, Source: Source{Layer: eff.ProfileLayer, Detail: "permissive"}}, "", true
	}
	return Grant{}, "not in the " + eff.Profile.String() + " profile's hosts", false
}

// Allowed reports whether Check allows name.
func (eff *Effective) Allowed(name string) bool {
	_, _, ok := eff.Check(name)
	return ok
}

// Ports returns the union of the allowed entries' ports, sorted; AnyPort reports that the
// profile allows every port (Permissive).
func (eff *Effective) Ports() []Port {
	var ps []Port
	for _, g := range eff.Hosts {
		ps = append(ps, g.Entry.EffectivePorts()...)
	}
	return normPorts(ps)
}

// AnyPort reports whether every destination port of a public address is allowed.
func (eff *Effective) AnyPort() bool { return eff != nil && eff.Profile == Permissive }

// String renders the effective policy for `brood policy show`: the profile and its layer,
// then one line per host, denial and dropped entry.
func (eff *Effective) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "profile\t%s\t(%s)\n", eff.Profile, Source{eff.ProfileLayer, eff.ProfileSource})
	if eff.AllowHostForbidden {
		fmt.Fprintf(&b, "allow-host\tforbidden\t(%s)\n", LayerSystem)
	}
	for _, g := range eff.Hosts {
		fmt.Fprintf(&b, "allow\t%s\t(%s)\n", g.Entry, g.Source)
	}
	for _, d := range eff.Denied {
		fmt.Fprintf(&b, "deny\t%s\t(%s)\n", d.Pattern, d.Layer)
	}
	for _, n := range eff.Dropped {
		fmt.Fprintf(&b, "dropped\t%s\t(%s)\n", n.What, n.Why)
	}
	return b.String()
}

// digestHeader starts the canonical encoding Digest hashes; its version changes with the
// encoding.
const digestHeader = "brood egress policy v1\n"

// Canonical returns the canonical encoding of what eff enforces, the input of Digest:
// UTF-8 text, one LF-terminated line per item, fields separated by one space:
//
//	brood egress policy v1
//	profile PROFILE                 locked, standard or permissive
//	allow PATTERN PORT[,PORT...]    one per host, in the order Check consults them; ports
//	                                as NUM/proto sorted (tcp before udp, then by number)
//	deny PATTERN                    one per distinct denied pattern, sorted bytewise
//
// Patterns are canonical (lower-case A-labels, "*." for a wildcard). Layers, sources,
// dropped entries and AllowHostForbidden are left out: they explain the policy but do not
// change what a session allows.
func (eff *Effective) Canonical() []byte {
	var b strings.Builder
	b.WriteString(digestHeader)
	fmt.Fprintf(&b, "profile %s\n", eff.Profile)
	for _, g := range eff.Hosts {
		ps := g.Entry.EffectivePorts()
		names := make([]string, len(ps))
		for i, p := range ps {
			names[i] = p.String()
		}
		fmt.Fprintf(&b, "allow %s %s\n", g.Entry.Pattern, strings.Join(names, ","))
	}
	var denied []string
	for _, d := range eff.Denied {
		denied = append(denied, d.Pattern.String())
	}
	slices.Sort(denied)
	for _, d := range slices.Compact(denied) {
		fmt.Fprintf(&b, "deny %s\n", d)
	}
	return []byte(b.String())
}

// Digest identifies what eff enforces: "sha256:" and the lower-case hex SHA-256 (FIPS
// 180-4) of Canonical. Two policies with the same digest allow and refuse the same names
// on the same ports.
func (eff *Effective) Digest() string {
	sum := sha256.Sum256(eff.Canonical())
	return "sha256:" + hex.EncodeToString(sum[:])
}
