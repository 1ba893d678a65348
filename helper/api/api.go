// Package api is the versioned wire protocol between the unprivileged brood frontend and
// the privileged broodd-helper: the request and response types, the frame codec, the typed
// errors and a typed client. Both sides import it, so it must stay small and must not
// import nftables, netlink, Landlock or package helper (frontend/deps_test.go checks this).
//
// Transport: a Unix stream socket. Every message is one frame: a 4-byte big-endian body
// length followed by a JSON body of at most MaxFrame bytes. Decoding is strict: unknown
// fields and trailing data are rejected. The first call on a connection must be Hello.
// File descriptors travel with SCM_RIGHTS on the frames of the calls that declare them
// (Request.FDs); no request carries a filesystem path (a reply may name one for display:
// ImageList.Store).
//
// Privilege: none; pure types and the codec, linked into both brood (the client) and
// broodd-helper (the server).
package api

import (
	"encoding/json"
	"os"
	"regexp"

	"brood.dev/brood/sandbox"
	"brood.dev/brood/sandbox/store"
)

// Version is the protocol version this package speaks. A helper answers a Hello of a
// different version with CodeVersionMismatch.
const Version = 1

// MaxFrame is the largest frame body in bytes (64 KiB, docs/ARCHITECTURE.md "Helper
// protocol").
const MaxFrame = 64 << 10

// MaxFDs is the largest number of descriptors one frame may carry.
const MaxFDs = 4

// DefaultSocket is where the frontend finds the helper (systemd/broodd-helper.socket).
const DefaultSocket = "/run/brood/helper.sock"

// SocketEnv names the environment variable that overrides DefaultSocket (tests, development).
const SocketEnv = "BROOD_HELPER_SOCKET"

// SocketPath returns the helper socket path: $BROOD_HELPER_SOCKET, or DefaultSocket.
func SocketPath() string {
	if p := os.Getenv(SocketEnv); p != "" {
		return p
	}
	return DefaultSocket
}

// Call is Request.Call, the name of a call.
type Call string

// Call names. Each call declares how many descriptors its request carries (CallFDs).
const (
	CallHello          Call = "hello"
	CallCreateSession  Call = "create_session"
	CallListSessions   Call = "list_sessions"
	CallDestroySession Call = "destroy_session"
	CallDoctor         Call = "doctor"
	// VM calls. StartVM boots the session's microVM on its share; Attach returns
	// a connected stream to the guest's SSH server; WaitVM blocks until the VMM is gone.
	CallStartVM Call = "start_vm"
	CallAttach  Call = "attach"
	CallStopVM  Call = "stop_vm"
	CallWaitVM  Call = "wait_vm"
	// CallListImages lists the images the helper boots, from its artifact store
	// (ListImagesArgs, ImageList). Like CallResolvePolicy, an addition to Version 1; an
	// older helper answers it with CodeUnknownCall.
	CallListImages Call = "list_images"
	// CallResolvePolicy answers the effective egress policy a StartVM with the same
	// egress inputs would enforce (ResolvePolicyArgs, Policy). It is an addition to
	// Version 1 that older clients never send; an older helper answers it with
	// CodeUnknownCall.
	CallResolvePolicy Call = "resolve_policy"
	// CallBuildImage starts, joins or follows the build of one of the helper's own
	// recipes (BuildImageArgs, BuildStatus); an addition to Version 1 (build.go).
	CallBuildImage Call = "build_image"
	// CallEgressLog returns, once the session's VM has ended, a read-only descriptor of
	// its whole egress decision log (SessionArgs; JSON lines of the DNS proxy's decisions,
	// at most 4 MiB, an unlinked file the helper keeps until the session is destroyed).
	// wait_vm's EgressSummary is bounded; this is the full record. An addition to Version
	// 1; an older helper answers it with CodeUnknownCall.
	CallEgressLog Call = "egress_log"
	// CallRefreshedLogins returns, once the session's VM has ended, the OAuth logins its
	// egress process saw refreshed, with their new real values (SessionArgs,
	// RefreshedLogins), for the owner to write back to the host login files. The helper
	// holds them only when start_vm's SessionSecrets.WriteBack asked for it and hands
	// them out once. An addition to Version 1; an older helper answers it with
	// CodeUnknownCall.
	CallRefreshedLogins Call = "refreshed_logins"
)

// CallFDs is the number of SCM_RIGHTS descriptors each call's request carries; a request
// whose Request.FDs or received descriptors differ is rejected with CodeBadRequest.
var CallFDs = map[Call]int{
	CallHello:           0,
	CallCreateSession:   1, // the workspace share: an O_DIRECTORY fd opened by the client
	CallListSessions:    0,
	CallDestroySession:  0,
	CallDoctor:          0,
	CallStartVM:         0,
	CallAttach:          0,
	CallStopVM:          0,
	CallWaitVM:          0,
	CallListImages:      0,
	CallResolvePolicy:   0,
	CallBuildImage:      0,
	CallEgressLog:       0,
	CallRefreshedLogins: 0,
}

// ResponseFDs is the number of SCM_RIGHTS descriptors each call's successful response
// carries (Response.FDs). Error responses carry none.
var ResponseFDs = map[Call]int{
	CallAttach:    1, // a connected unix stream socket: the guest's SSH channel
	CallEgressLog: 1, // a read-only regular file: the session's decision log
}

// Request is one call from the client. Args is the call's argument object (decoded
// strictly into the call's *Args type); FDs is the number of descriptors attached.
type Request struct {
	Call Call            `json:"call"`
	FDs  int             `json:"fds,omitempty"`
	Args json.RawMessage `json:"args,omitempty"`
}

// Response answers one Request: exactly one of Result and Error is set.
type Response struct {
	Result json.RawMessage `json:"result,omitempty"`
	Error  *Error          `json:"error,omitempty"`
	FDs    int             `json:"fds,omitempty"` // descriptors attached (ResponseFDs)
}

// HelloArgs opens a conversation; Version must equal the helper's Version.
type HelloArgs struct {
	Version int `json:"version"`
}

// Peer is the identity the helper read from the socket (SO_PEERCRED) at accept. PID is for
// logs only: pids are reused.
type Peer struct {
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
	PID int32  `json:"pid"`
}

// Landlock is the helper's self-confinement status.
type Landlock struct {
	// ABI is the kernel's Landlock ABI version (0: no Landlock).
	ABI int `json:"abi"`
	// PinnedABI is the ABI the helper's rules were written and tested for.
	PinnedABI int `json:"pinned_abi"`
	// Enforced reports whether a ruleset was applied to the helper.
	Enforced bool `json:"enforced"`
	// Mode is LandlockEnforced, LandlockDegraded (weaker or no confinement, allowed by
	// config) or LandlockOff (development: --no-landlock).
	Mode LandlockMode `json:"mode"`
	// Detail explains a degraded or off mode.
	Detail string `json:"detail,omitempty"`
}

// Capabilities answers Hello.
type Capabilities struct {
	Version  int           `json:"version"`
	Helper   string        `json:"helper"`   // helper build version
	Backends []string      `json:"backends"` // VM backends available on the host, e.g. "qemu", "krun"
	Accel    sandbox.Accel `json:"accel"`    // sandbox.AccelKVM when KVM is usable, else sandbox.AccelTCG
	Landlock Landlock      `json:"landlock"`
	Peer     Peer          `json:"peer"`          // who the helper thinks you are
	Policy   string        `json:"policy_digest"` // digest of the system egress policy file ("none": no file, "invalid: ...": unloadable)
	// Images lists the names of the built images the helper can boot (ValidImageName
	// names), so a client can refuse an unknown image before it snapshots anything.
	// Nil from a helper older than this field: the client cannot tell and asks StartVM.
	Images []string `json:"images"`
	// HostCPUs and HostMemoryMiB are the largest StartVMArgs.CPUs and MemoryMiB the
	// helper accepts on this host (runtime.NumCPU(), physical memory in MiB); 0: unknown.
	HostCPUs      int `json:"host_cpus,omitempty"`
	HostMemoryMiB int `json:"host_memory_mib,omitempty"`
	// Secrets is true when the helper accepts StartVMArgs.Secrets: its egress process
	// terminates TLS for the bound hosts and swaps placeholders (secrets.go). The helper
	// daemon sets it when its sessions' networks run in the egress process; a client
	// of a helper without it gives the guest real values, as before.
	Secrets bool `json:"secrets,omitempty"`
	// LoginWriteBack is true when the helper also takes SessionSecrets.WriteBack and
	// answers CallRefreshedLogins; a client sends WriteBack only to such a helper (an
	// older one would refuse the unknown field).
	LoginWriteBack bool `json:"login_write_back,omitempty"`
}

// CreateSessionArgs creates a session. The workspace share is the single descriptor
// attached to the request (an O_DIRECTORY fd the client opened); it has no fields.
type CreateSessionArgs struct{}

// SessionArgs names one of the caller's sessions.
type SessionArgs struct {
	ID string `json:"id"`
}

// ListSessionsArgs has no fields; the helper lists the caller's sessions (all for root).
type ListSessionsArgs struct{}

// DoctorArgs has no fields.
type DoctorArgs struct{}

// ListImagesArgs has no fields.
type ListImagesArgs struct{}

// Image is one image the helper boots: the newest file of its name in the artifact
// store, root-owned and not writable by group or others.
type Image struct {
	Name   string `json:"name"`   // StartVMArgs.Image, e.g. "test"
	File   string `json:"file"`   // file name in the store's images directory
	Digest string `json:"digest"` // first 32 hex digits of the image tree's SHA-256
	Size   int64  `json:"size"`   // bytes
	Built  int64  `json:"built"`  // unix seconds the file was stored
}

// ImageList answers ListImages.
type ImageList struct {
	// Store is the artifact store's root (the helper's state_dir), for display.
	Store string `json:"store"`
	// Images are sorted by name.
	Images []Image `json:"images"`
	// Recipes are the image names `broodd-helper image build` can build, sorted.
	Recipes []string `json:"recipes"`
	// Policy is the system policy's [images] table as the helper reads it now (nil
	// from an older helper).
	Policy *ImagePolicy `json:"policy,omitempty"`
	// BuildsOnDemand reports that build_image can build a recipe now: the helper runs
	// builds (under systemd as transient units; without it only with the build
	// capabilities) and the system policy leaves on_demand_builds on.
	BuildsOnDemand bool `json:"builds_on_demand,omitempty"`
}

// ImagePolicy is the system policy's [images] table (ociref.Policy) as the helper
// enforces it: the defaults when the file has none.
type ImagePolicy struct {
	File           string   `json:"file"`            // the system policy file; "" when there is none
	RequireDigests bool     `json:"require_digests"` // tags are refused
	AllowedImages  []string `json:"allowed_images"`  // empty: any image
	OnDemandBuilds bool     `json:"on_demand_builds"`
}

// Session describes one helper session. Resource names are generated by the helper.
type Session struct {
	ID      string       `json:"id"`
	Owner   uint32       `json:"owner"`   // uid of the peer that created it
	State   SessionState `json:"state"`   // SessionCreated, SessionRunning (StartVM) or SessionStopped (the VMM is gone)
	Tap     string       `json:"tap"`     // tap device name reserved for the session ("brd"+id)
	Created int64        `json:"created"` // unix seconds
}

// SessionList answers ListSessions.
type SessionList struct {
	Sessions []Session `json:"sessions"`
}

// Empty is the result of calls that return nothing.
type Empty struct{}

// Check is one line of the helper's doctor report. Warn marks a check that passed in a
// degraded but supported mode (TCG instead of KVM): brood works, the user should know.
type Check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Warn   bool   `json:"warn,omitempty"`
	Detail string `json:"detail"`
}

// DoctorReport answers Doctor.
type DoctorReport struct {
	Checks []Check `json:"checks"`
}

// sessionIDRe is the only form of session id: 8 lower-case hex digits, generated by the
// helper, so a tap name "brd"+id is 11 bytes (the kernel limit is 15, IFNAMSIZ-1).
var sessionIDRe = regexp.MustCompile(`^[0-9a-f]{8}$`)

// ValidSessionID reports whether id has the form of a helper-generated session id.
func ValidSessionID(id string) bool { return sessionIDRe.MatchString(id) }

// StartVMArgs boots the microVM of session ID on the share given at CreateSession.
// Image names a root-owned image the helper knows (ValidImageName); the kernel and
// initramfs are the helper's own. ClientKey is the session's ephemeral SSH public key in
// authorized_keys format ("ssh-ed25519 AAAA..."): the only key the guest accepts.
type StartVMArgs struct {
	ID         string `json:"id"`
	Image      string `json:"image"`
	CPUs       int    `json:"cpus"`        // vCPUs, 0 = helper default
	MemoryMiB  int    `json:"memory_mib"`  // MiB, 0 = helper default
	TimeoutSec int    `json:"timeout_sec"` // whole-VM lifetime in seconds, 0 = helper default
	ClientKey  string `json:"client_key"`
	// Clock is the host's time (Unix seconds) for the guest's clock.
	Clock int64 `json:"clock"`
	// Egress names the egress profile ("locked", "standard", "permissive"), or
	// EgressDefault: a network with the profile the configuration layers choose, else the
	// system policy's default_profile, else standard; empty means no network device at
	// all. The helper caps it with the system policy.
	Egress string `json:"egress,omitempty"`
	// AllowHosts are --allow-host values ("NAME" or "NAME:PORT[/proto]..."); refused
	// (CodePolicy) when the system policy forbids adding hosts.
	AllowHosts []string `json:"allow_hosts,omitempty"`
	// Agent names the agent whose LLM provider hosts (from the helper's own agent table,
	// never from the client) the profile allows.
	Agent string `json:"agent,omitempty"`
	// UserEgress and WorkspaceEgress are the [egress] tables of the user's config and of
	// the workspace's .brood.toml. They can only tighten what the system policy allows
	// (a workspace may not add hosts); nil: the layer is empty.
	UserEgress      *EgressLayer `json:"user_egress,omitempty"`
	WorkspaceEgress *EgressLayer `json:"workspace_egress,omitempty"`
	// Direct: the session's share is the workspace itself, mounted read-write with no
	// snapshot and no review (brood run --workspace-mode direct --yes). Refused
	// (CodePolicy) when the system policy forbids it (forbid_direct).
	Direct bool `json:"direct,omitempty"`
	// Secrets are the session's secret bindings (secrets.go): the real values the egress
	// process swaps for the guest's placeholders. Only for a helper whose Capabilities
	// say Secrets; another refuses the call. Never logged or stored by either side.
	Secrets *SessionSecrets `json:"secrets,omitempty"`
	// SSHAgent: brood forwards the developer's filtered SSH agent into the guest
	// (--ssh-agent); refused when the system policy sets allow_ssh_agent = false.
	SSHAgent bool `json:"ssh_agent,omitempty"`
}

// EgressLayer is one configuration layer's [egress] table as written (the fields of
// netpolicy.ConfigFile); the helper validates it.
type EgressLayer struct {
	Profile    string            `json:"profile,omitempty"`
	AllowHosts []string          `json:"allow_hosts,omitempty"`
	DenyHosts  []string          `json:"deny_hosts,omitempty"`
	Hosts      []EgressLayerHost `json:"hosts,omitempty"`
	// Discovered are package registries found in the user's own tool configuration
	// (~/.npmrc, pip.conf, ~/.cargo/config.toml, environment; netpolicy.Discoverer) — user
	// layer only. The helper treats them as user-controlled: used from the standard
	// profile up, removed by any denial, dropped when the system forbids adding hosts.
	Discovered []EgressDiscovered `json:"discovered,omitempty"`
}

// EgressDiscovered is one registry host discovered in the user's tool configuration.
type EgressDiscovered struct {
	Name  string   `json:"name"`            // exact host name
	Ports []string `json:"ports,omitempty"` // "443/tcp"; empty: 443/tcp
	Tool  string   `json:"tool"`            // "npm", "pnpm", "yarn", "pip", "cargo", "go"
	From  string   `json:"from"`            // the file, variable or tool default it came from
}

// EgressLayerHost is one [[egress.host]] entry: a pattern and its ports ("443", "22/tcp").
type EgressLayerHost struct {
	Name  string   `json:"name"`
	Ports []string `json:"ports,omitempty"`
}

// EgressInfo describes a session's network: the guest's and the proxy's addresses and the
// effective policy. Nil in VMInfo when the VM has no network device.
type EgressInfo struct {
	Profile string   `json:"profile"`
	Tap     string   `json:"tap"`
	GuestV4 string   `json:"guest_v4"`           // "10.213.0.2/30"
	DNS     string   `json:"dns"`                // the session's DNS proxy (the tap's host address)
	GuestV6 string   `json:"guest_v6,omitempty"` // "fd62:726f:6f64::2/126"; empty: the guest has no IPv6
	DNS6    string   `json:"dns6,omitempty"`     // the proxy's IPv6 address, when GuestV6 is set
	Hosts   []string `json:"hosts"`              // the allowed host entries ("pattern (443/tcp)")
	// AgentHosts are the entries of Hosts the agent's LLM provider has (the helper's agent
	// table: what the agent must reach to work at all), in the same form.
	AgentHosts []string `json:"agent_hosts,omitempty"`
	// Digest identifies the effective policy the session enforces (Policy.Digest: the
	// same value ResolvePolicy answers for the same inputs).
	Digest string `json:"policy_digest"`
	// SystemDigest is "sha256:<hex>" of the system policy file applied, or "none".
	SystemDigest string `json:"system_policy_digest,omitempty"`
	Warning      string `json:"warning,omitempty"` // degraded enforcement (e.g. no IPv6 forwarding)
}

// EgressDefault as StartVMArgs.Egress asks for a network whose profile the helper
// chooses as when no flag names one: what `brood run AGENT` sends without --egress.
const EgressDefault = "default"

// ResolvePolicyArgs are the egress inputs of a StartVM request (StartVMArgs.PolicyArgs),
// with the same meaning and JSON names, except that an empty Egress leaves the profile to
// the configuration layers (StartVM gives no network then), as EgressDefault does.
type ResolvePolicyArgs struct {
	Egress          string       `json:"egress,omitempty"`
	AllowHosts      []string     `json:"allow_hosts,omitempty"`
	Agent           string       `json:"agent,omitempty"`
	UserEgress      *EgressLayer `json:"user_egress,omitempty"`
	WorkspaceEgress *EgressLayer `json:"workspace_egress,omitempty"`
}

// PolicyArgs returns the egress inputs of a.
func (a StartVMArgs) PolicyArgs() ResolvePolicyArgs {
	return ResolvePolicyArgs{Egress: a.Egress, AllowHosts: a.AllowHosts, Agent: a.Agent,
		UserEgress: a.UserEgress, WorkspaceEgress: a.WorkspaceEgress}
}

// SetPolicyArgs sets a's egress inputs to p's.
func (a *StartVMArgs) SetPolicyArgs(p ResolvePolicyArgs) {
	a.Egress, a.AllowHosts, a.Agent = p.Egress, p.AllowHosts, p.Agent
	a.UserEgress, a.WorkspaceEgress = p.UserEgress, p.WorkspaceEgress
}

// Policy answers ResolvePolicy: an effective egress policy, the layer and source of every
// part of it, and its digest.
type Policy struct {
	Profile      string `json:"profile"`       // "locked", "standard" or "permissive"
	ProfileLayer string `json:"profile_layer"` // the layer that chose it ("default", "system", "user", ...)
	// ProfileSource, when no configuration layer chose the profile, says how the default
	// came about: "built-in default" (standard), "default_profile" (the system policy's)
	// or "max_profile" (the default capped by the system policy); empty otherwise.
	ProfileSource string `json:"profile_source,omitempty"`
	// AllowHostForbidden: the system policy refuses hosts added by the user or flags.
	AllowHostForbidden bool `json:"allow_host_forbidden,omitempty"`
	// DirectForbidden: the system policy forbids direct mode (forbid_direct).
	DirectForbidden bool `json:"direct_forbidden,omitempty"`
	// RawEnvForbidden and GitTokenForbidden: the system policy forbids raw_env
	// (forbid_raw_env) and --git-token (forbid_git_token).
	RawEnvForbidden   bool `json:"raw_env_forbidden,omitempty"`
	GitTokenForbidden bool `json:"git_token_forbidden,omitempty"`
	// LoginWriteBackForbidden: the system policy forbids writing refreshed OAuth
	// tokens back to the host login files (forbid_login_write_back).
	LoginWriteBackForbidden bool `json:"login_write_back_forbidden,omitempty"`
	// SSHAgentForbidden: the system policy forbids --ssh-agent (allow_ssh_agent = false).
	SSHAgentForbidden bool `json:"ssh_agent_forbidden,omitempty"`
	// Hosts are the allowed entries in the order the DNS proxy consults them.
	Hosts  []PolicyHost   `json:"hosts"`
	Denied []PolicyDenial `json:"denied,omitempty"`
	// Dropped are entries left out, each with the reason.
	Dropped []PolicyNote `json:"dropped,omitempty"`
	// Digest is "sha256:<hex>" over the policy's canonical encoding (profile, host
	// patterns with ports, denied patterns); EgressInfo.Digest of a session started with
	// the same inputs is equal.
	Digest string `json:"digest"`
	// SystemDigest is "sha256:<hex>" of the system policy file, or "none".
	SystemDigest string `json:"system_policy_digest"`
}

// PolicyHost is one allowed entry: a name or "*.suffix" pattern, its ports ("443/tcp"),
// the layer that added it and a detail of its source (the agent, "code hosting", "npm:
// FILE"; may be empty).
type PolicyHost struct {
	Name   string   `json:"name"`
	Ports  []string `json:"ports"`
	Layer  string   `json:"layer"`
	Source string   `json:"source,omitempty"`
}

// PolicyDenial is one denied pattern and the layer that denied it.
type PolicyDenial struct {
	Pattern string `json:"pattern"`
	Layer   string `json:"layer"`
}

// PolicyNote is an entry left out of the policy and why.
type PolicyNote struct {
	What string `json:"what"`
	Why  string `json:"why"`
}

// EgressSummary condenses a session's egress decision log, returned by WaitVM. It is
// bounded whatever the guest queried (at most SummaryNames names per list and
// SummaryPinned addresses, so a WaitVM reply stays far below MaxFrame): Allowed, Refused
// and Pinned are the top entries, the totals count everything.
type EgressSummary struct {
	Allowed  map[string]int `json:"allowed,omitempty"` // top names: queries answered
	Refused  map[string]int `json:"refused,omitempty"` // top names: queries refused
	Failed   int            `json:"failed,omitempty"`  // queries answered SERVFAIL
	Pinned   []string       `json:"pinned,omitempty"`  // distinct addresses pinned (first ones, sorted)
	Stripped int            `json:"stripped,omitempty"`
	// Queries counts every decision, logged or dropped; AllowedNames and RefusedNames
	// count the distinct names of the decisions logged.
	Queries      int `json:"queries,omitempty"`
	AllowedNames int `json:"allowed_names,omitempty"`
	RefusedNames int `json:"refused_names,omitempty"`
	// Truncated: a list above was cut to its bound, or log entries were dropped.
	Truncated bool `json:"truncated,omitempty"`
	// LogDropped counts decisions not written because the log reached its byte quota.
	LogDropped int `json:"log_dropped,omitempty"`
	// ConnsAdmitted, ConnsRefused and ConnsFailed count the TCP 80/443 connections the
	// session's name gate admitted, reset, or admitted but could not connect; RefusedConns
	// holds the top refused ones ("NAME -> ADDR:PORT": connections). Decisions of the
	// gate are also counted in Queries.
	ConnsAdmitted int            `json:"conns_admitted,omitempty"`
	ConnsRefused  int            `json:"conns_refused,omitempty"`
	ConnsFailed   int            `json:"conns_failed,omitempty"`
	RefusedConns  map[string]int `json:"refused_conns,omitempty"`
	// Secrets counts, per bound host (the SNI of a terminated connection), the requests
	// whose placeholders were swapped for real values, the requests refused, and the
	// token responses rewritten; at most SummaryNames hosts, the rest under "(other)".
	// Empty without secret bindings.
	Secrets map[string]SecretCounts `json:"secrets,omitempty"`
}

// SecretCounts is one host's line of EgressSummary.Secrets.
type SecretCounts struct {
	Swaps     int `json:"swaps,omitempty"`
	Blocks    int `json:"blocks,omitempty"`
	Refreshes int `json:"refreshes,omitempty"`
}

// Bounds of an EgressSummary: names per list (a name is at most 253 bytes, RFC 1035)
// and pinned addresses.
const (
	SummaryNames  = 32
	SummaryPinned = 64
)

// VMInfo answers StartVM.
type VMInfo struct {
	// HostKey is the guest's per-session SSH host public key (authorized_keys format),
	// generated by the helper: the frontend pins it and accepts no other.
	HostKey string        `json:"host_key"`
	Accel   sandbox.Accel `json:"accel"`   // sandbox.AccelKVM or sandbox.AccelTCG
	Warning string        `json:"warning"` // non-empty when degraded (TCG): print it loudly
	Backend string        `json:"backend"` // "qemu"
	// ImageFile is the store file the VM boots ("codex-<hex32>.erofs") and ImageDigest the
	// image tree digest its name carries (hex, the store's short form); empty from a helper
	// that does not say.
	ImageFile   string `json:"image_file,omitempty"`
	ImageDigest string `json:"image_digest,omitempty"`
	// Egress is the session's network; nil: no network device.
	Egress *EgressInfo `json:"egress,omitempty"`
	// SecretsCA is the session CA certificate (PEM) the guest must trust, made by the
	// egress process when StartVMArgs.Secrets was given; empty otherwise (secrets.go).
	SecretsCA string `json:"secrets_ca,omitempty"`
}

// VMExit answers WaitVM once the VMM process is gone.
type VMExit struct {
	// Outcome is OutcomePoweroff (the guest shut down cleanly), OutcomeStopped (StopVM),
	// OutcomeTimeout (TimeoutSec passed, VMM killed) or OutcomeFailed (any other exit).
	Outcome VMOutcome `json:"outcome"`
	Detail  string    `json:"detail,omitempty"`
	// ConsoleTail is the last bytes (at most 8 KiB) of the guest's serial console, for
	// diagnosing a hang or panic. It is guest output: escape it before printing.
	ConsoleTail string `json:"console_tail,omitempty"`
	// Egress summarises the session's DNS decisions; nil when it had no network.
	Egress *EgressSummary `json:"egress,omitempty"`
}

// ValidImageName reports whether name has the form of an image name ("test", "codex"):
// it names a file of the helper's root-owned artifact store, never a path
// (store.ValidImageName, the store's own rule).
func ValidImageName(name string) bool { return store.ValidImageName(name) }
