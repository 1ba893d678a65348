package frontend

import (
	"fmt"
	"io"
	"strings"

	"brood.dev/brood/frontend/diff"
	"brood.dev/brood/helper/api"
)

// agentNote names what the run starts and the image it boots, with the store file and
// digest the helper reported (StartVM's answer; left out when the helper does not say):
// "agent codex on image codex (file codex-<hex>.erofs, digest <hex>)".
func agentNote(spec RunSpec, info api.VMInfo) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s on image %s", diff.Escape(spec.Describe), diff.Escape(spec.VM.Image))
	var parts []string
	if info.ImageFile != "" {
		parts = append(parts, "file "+diff.Escape(info.ImageFile))
	}
	if info.ImageDigest != "" {
		parts = append(parts, "digest "+diff.Escape(info.ImageDigest))
	}
	if len(parts) > 0 {
		fmt.Fprintf(&b, " (%s)", strings.Join(parts, ", "))
	}
	return b.String()
}

// providerNote is ", provider HOST (PORTS), ..." for the network line: the hosts the
// agent's LLM provider has in the session's policy; "" when it has none.
func providerNote(e *api.EgressInfo) string {
	if len(e.AgentHosts) == 0 {
		return ""
	}
	hosts := make([]string, len(e.AgentHosts))
	for i, h := range e.AgentHosts {
		hosts[i] = diff.Escape(h)
	}
	return ", provider " + strings.Join(hosts, ", ")
}

// tee returns w, or a writer that copies to w and then to tail when tail is set. A
// write error of tail is ignored: the copy is for a hint, the terminal is what counts.
func tee(w, tail io.Writer) io.Writer {
	if tail == nil || w == nil {
		return w
	}
	return teeWriter{w, tail}
}

type teeWriter struct{ w, tail io.Writer }

func (t teeWriter) Write(p []byte) (int, error) {
	n, err := t.w.Write(p)
	t.tail.Write(p[:n])
	return n, err
}
