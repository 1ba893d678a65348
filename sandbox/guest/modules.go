package guest

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// modLoader loads kernel modules from lib/modules/<release> with finit_module(2),
// dependencies first, following modules.dep (whose dependency lists are already the
// full closure; the last entry must be loaded first).
type modLoader struct {
	dir     string               // lib/modules/<release>
	logf    func(string, ...any) // per-module debug log, or nil
	deps    map[string][]string  // module file -> dependency files
	byName  map[string]string    // module name -> file
	builtin map[string]bool
	loaded  map[string]bool // module files
}

func newModLoader(dir string) (*modLoader, error) {
	l := &modLoader{dir: dir, deps: map[string][]string{}, byName: map[string]string{}, builtin: map[string]bool{}, loaded: map[string]bool{}}
	dep, err := os.ReadFile(filepath.Join(dir, "modules.dep"))
	if err != nil {
		return nil, fmt.Errorf("load modules: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(dep))
	for sc.Scan() {
		file, deps, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		l.deps[file] = strings.Fields(deps)
		l.byName[modName(file)] = file
	}
	if b, err := os.ReadFile(filepath.Join(dir, "modules.builtin")); err == nil {
		for _, f := range strings.Fields(string(b)) {
			l.builtin[modName(f)] = true
		}
	}
	return l, nil
}

// modName is the kernel's name of a module file: base name without .ko, '-' -> '_'.
func modName(s string) string {
	s = path.Base(s)
	if i := strings.Index(s, ".ko"); i >= 0 {
		s = s[:i]
	}
	return strings.ReplaceAll(s, "-", "_")
}

// load loads the module called name and its dependencies. Built-in modules are skipped.
func (l *modLoader) load(name string) error {
	name = modName(name)
	file, ok := l.byName[name]
	if !ok {
		if l.builtin[name] {
			return nil
		}
		return fmt.Errorf("load module %s: not in modules.dep", name)
	}
	return l.loadFile(file)
}

func (l *modLoader) loadFile(file string) error {
	if l.loaded[file] {
		return nil
	}
	deps := l.deps[file]
	for i := len(deps) - 1; i >= 0; i-- {
		if err := l.loadFile(deps[i]); err != nil {
			return err
		}
	}
	p := filepath.Join(l.dir, file)
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open module", Path: p, Err: err}
	}
	defer unix.Close(fd)
	t0 := time.Now()
	if err := unix.FinitModule(fd, "", 0); err != nil && err != unix.EEXIST {
		return &os.PathError{Op: "finit_module", Path: p, Err: err}
	}
	if l.logf != nil {
		l.logf("module %s loaded in %v", modName(file), time.Since(t0).Round(time.Microsecond))
	}
	l.loaded[file] = true
	return nil
}
