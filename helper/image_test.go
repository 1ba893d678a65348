//go:build linux

package helper

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
)

// TestListImagesCall: list_images answers with the images StartVM would boot from the
// configured state_dir (one per name, root-owned only) and the recipes.
func TestListImagesCall(t *testing.T) {
	state := artifactTree(t)
	ts := startServer(t, func(c *Config) { c.StateDir = state })
	c := ts.dial(t)
	l, err := c.ListImages(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if l.Store != state || len(l.Images) != 1 || l.Images[0].Name != "test" || l.Images[0].Digest != "0123456789abcdef0123456789abcdef" ||
		l.Images[0].Size != int64(len("image")) || !slices.Equal(l.Recipes, []string{"claude-code", "codex", "gemini", "hermes", "opencode", "test"}) {
		t.Errorf("list_images = %+v", l)
	}
	// The same names Hello reports (builtImages) and openArtifacts opens.
	if got := builtImages(artifactCfg(state)); !slices.Equal(got, []string{"test"}) {
		t.Errorf("builtImages = %v", got)
	}
}

// TestImageBuildRefusals: unknown recipes and bad usage fail before anything is built.
func TestImageBuildRefusals(t *testing.T) {
	cfg := artifactCfg(t.TempDir())
	var log bytes.Buffer
	if _, err := buildImage(context.Background(), cfg, "nosuch", &log, nil); !errors.Is(err, ErrUnknownImage) || !strings.Contains(err.Error(), "claude-code, codex, gemini, hermes, opencode, test") {
		t.Errorf("build nosuch = %v", err)
	}
	if log.Len() != 0 {
		t.Errorf("refused build wrote %q", log.String())
	}
	for _, args := range [][]string{nil, {"list"}, {"build"}, {"build", "a", "b"}, {"build", "--bogus", "test"}} {
		if code := imageMain(args); code != 2 {
			t.Errorf("image %q: exit %d, want 2", args, code)
		}
	}
	if _, err := imageConfig("/nonexistent/helper.toml", ""); err == nil {
		t.Errorf("missing config accepted")
	}
	if _, err := imageConfig(DefaultConfigPath, "relative/dir"); !errors.Is(err, ErrConfig) {
		t.Errorf("relative --state-dir = %v, want ErrConfig", err)
	}
}
