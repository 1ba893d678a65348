package vmtest

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"brood.dev/brood/sandbox/assets"
	"brood.dev/brood/sandbox/guestcfg"
	"brood.dev/brood/sandbox/image"
	"brood.dev/brood/sandbox/store"
)

// TestVMAgentImage boots an agent's image (built on first use, into the default store,
// minutes of CPU: so only the agents BROOD_VMTEST_AGENT_IMAGES names, comma-separated,
// or "all") as uid 123456 and runs the agent's --version there, which must print, and
// writes the agent's config directory in the tmpfs home, as an agent's first start does.
func TestVMAgentImage(t *testing.T) {
	which := os.Getenv("BROOD_VMTEST_AGENT_IMAGES")
	for _, ag := range []struct{ image, cmd, dir string }{
		{"codex", "codex", ".codex"}, {"claude-code", "claude", ".claude"},
		{"opencode", "opencode", ".local/share/opencode"}, {"gemini", "gemini", ".gemini"},
	} {
		t.Run(ag.image, func(t *testing.T) {
			if which != "all" && !slices.Contains(strings.Split(which, ","), ag.image) {
				t.Skipf("set BROOD_VMTEST_AGENT_IMAGES=%s (or all) to boot the %s image (built if missing)", ag.image, ag.image)
			}
			base := Get(t)
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Minute)
			defer cancel()
			img, err := image.Ensure(ctx, store.New("").Images(), ag.image, nil)
			if err != nil {
				t.Fatal(err)
			}
			a := &assets.Set{Kernel: base.Kernel, Initramfs: base.Initramfs, Image: img}
			t.Logf("image %s", filepath.Base(img))
			t.Setenv("BROOD_VMTEST_MEMORY_MIB", "1024") // Node-based agents need more than the test VMs' 512
			r := bootCfg(t, a, "", 5*time.Minute, nil, func(c *guestcfg.Config) { c.UID, c.GID = 123456, 123456 })
			r.dial(t)
			t0 := time.Now()
			out, errOut, code := r.run(t, ag.cmd+` --version && mkdir -p "$HOME/`+ag.dir+`" && echo ok > "$HOME/`+ag.dir+`/x" && cat "$HOME/`+ag.dir+`/x"`)
			if code != 0 || !strings.HasSuffix(out, "ok\n") || len(strings.TrimSpace(strings.TrimSuffix(out, "ok\n"))) == 0 {
				t.Errorf("%s --version as uid 123456: status %d stdout %q stderr %q", ag.cmd, code, out, errOut)
			}
			t.Logf("%s --version in the VM: %s (%v; boot to SSH %v)", ag.cmd, strings.TrimSpace(strings.TrimSuffix(out, "ok\n")),
				time.Since(t0).Round(time.Second), t0.Sub(r.start).Round(time.Second))
			r.closeAndWait(t)
		})
	}
}
