package cli

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"

	"brood.dev/brood/frontend"
	"brood.dev/brood/frontend/review"
)

// tailBytes is how much of the agent's last output an outputTail keeps (4 KiB: a screen
// of an exiting CLI's error), and tailLines how many of its lines the hint prints.
const (
	tailBytes = 4 << 10
	tailLines = 10
)

// Exit statuses of a command the guest's shell could not run (POSIX, Shell Command
// Language, 2.8.2 "Exit Status for Commands").
const (
	exitNotExecutable = 126
	exitNotFound      = 127
)

// exitSIGILL is the status of a command killed by SIGILL (128 + signal 4, signal(7)): an
// illegal instruction, a binary built for CPU features the VM's CPU lacks.
const exitSIGILL = 128 + 4

// providerKeys are the environment variables each built-in agent reads its LLM
// provider's API key from (each CLI's documented variable); one of them set and
// forwarded is enough.
var providerKeys = map[string][]string{
	"claude-code": {"ANTHROPIC_API_KEY"},
	"codex":       {"OPENAI_API_KEY"},
	"gemini":      {"GEMINI_API_KEY", "GOOGLE_API_KEY"},
	"opencode":    {"ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENROUTER_API_KEY"},
	"hermes":      {"NOUS_API_KEY", "OPENROUTER_API_KEY", "OPENAI_API_KEY"},
}

// outputTail keeps the last tailBytes of what the agent wrote (frontend.Stdio.Tail).
type outputTail struct {
	mu  sync.Mutex
	buf []byte
}

func (t *outputTail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - tailBytes; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

// lines returns the last n non-blank lines kept, each escaped (guest output: no terminal
// control reaches the developer's terminal) and without carriage returns.
func (t *outputTail) lines(n int) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for _, l := range strings.Split(string(t.buf), "\n") {
		l = strings.TrimRight(l, "\r")
		if i := strings.LastIndexByte(l, '\r'); i >= 0 {
			l = l[i+1:] // a line redrawn in place: what remained on screen
		}
		if strings.TrimSpace(l) != "" {
			out = append(out, review.EscapeLine(l))
		}
	}
	return out[max(0, len(out)-n):]
}

// exitedAtOnce reports whether res is an agent that failed before doing any work: it
// exited with a non-zero status and the session changed nothing in the workspace. (A
// failing agent that did work left changes to review; one that never started has none.)
func exitedAtOnce(res *frontend.RunResult) bool {
	st := res.Record.ExitStatus
	return st != nil && *st != 0 && res.Gate != nil && len(res.Gate.Changes) == 0
}

// exitCauses lists the likely causes of an agent run r that exited at once, most
// specific first: the image cannot run the agent's command (status 126 or 127: the image
// is missing the agent, or too old; status 132: the CPU lacks a feature), no API key for the agent's provider reaches the VM
// (environ is the developer's environment), no network (--egress none), names the
// session's egress refused (its egress summary). Empty when none applies.
func exitCauses(r runRequest, res *frontend.RunResult, environ []string) []string {
	var out []string
	if st := *res.Record.ExitStatus; (st == exitNotFound || st == exitNotExecutable) && len(r.agent.Command) > 0 {
		out = append(out, fmt.Sprintf("status %d: the image %s cannot run %q: it lacks the agent or is too old; rebuild it: %s",
			st, r.image, r.agent.Command[0], buildCommand(r.image)))
	}
	if *res.Record.ExitStatus == exitSIGILL {
		out = append(out, "status 132: the agent died of an illegal instruction (SIGILL): its binary needs a CPU feature the VM's CPU lacks "+
			"(under TCG, QEMU before 7.2 emulates no AVX)")
	}
	if keys, ok := providerKeys[r.agent.Name]; ok && r.agent.Source == "built-in" && !keyForwarded(keys, r.agent.Env, environ) {
		out = append(out, fmt.Sprintf("no API key for %s in your environment: set %s (brood forwards it to the VM)",
			r.agent.Name, strings.Join(keys, " or ")))
	}
	if res.Record.Network == nil && agentRun(r.agent) {
		out = append(out, "the VM had no network (--egress none): the agent cannot reach its provider")
	}
	if e := res.Record.Egress; e != nil && len(e.Refused) > 0 {
		var names []string
		for n := range e.Refused {
			names = append(names, review.EscapeLine(n))
		}
		slices.Sort(names)
		out = append(out, fmt.Sprintf("egress refused %s (the session's egress summary, %s): allow a host with --allow-host NAME or a looser --egress; brood policy show --agent %s lists what is allowed",
			strings.Join(names, ", "), frontend.VMRecordFile, r.agent.Name))
	}
	return out
}

// keyForwarded reports whether one of keys is set (non-empty) in environ and forwarded
// by the agent's patterns.
func keyForwarded(keys, patterns, environ []string) bool {
	for _, kv := range forwardEnv(patterns, environ) {
		if slices.Contains(keys, kv[0]) && kv[1] != "" {
			return true
		}
	}
	return false
}

// printExitHint prints, for an agent that exited at once (exitedAtOnce), its last output
// lines and the likely causes on w; nothing otherwise.
func printExitHint(w io.Writer, r runRequest, res *frontend.RunResult, tail *outputTail) {
	if res == nil || !exitedAtOnce(res) {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s exited with status %d and changed nothing", describeAgent(r), *res.Record.ExitStatus)
	if lines := tail.lines(tailLines); len(lines) > 0 {
		b.WriteString("; its last output (escaped):\n")
		for _, l := range lines {
			fmt.Fprintf(&b, "  | %s\n", l)
		}
	} else {
		b.WriteString(" and printed nothing\n")
	}
	causes := exitCauses(r, res, os.Environ())
	if len(causes) == 0 {
		causes = []string{"no likely cause found: brood run shell --image " + r.image + " starts a shell on the same image to try the agent by hand"}
	}
	for _, c := range causes {
		fmt.Fprintf(&b, "hint: %s\n", c)
	}
	io.WriteString(w, b.String())
}
