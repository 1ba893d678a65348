package guest

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// modLoader loads kernel modules from lib/modules/<release> with finit_module(2),
// following modules.dep (whose dependency lists are already the full closure) and the
// "pre" soft dependencies of modules.softdep (the initramfs resolves them to module
// names). start begins loading and returns at once; wait blocks for the modules one
// boot step needs. Independent modules load concurrently: each module waits only for
// what it depends on, so a boot step (the SSH port, the root disk, the share) starts as
// soon as its own modules are in, and with several vCPUs the loads themselves overlap.
type modLoader struct {
	dir     string               // lib/modules/<release>
	logf    func(string, ...any) // per-module debug log, or nil
	deps    map[string][]string  // module file -> dependency files
	softPre map[string][]string  // module name -> module names to load first
	byName  map[string]string    // module name -> file
	builtin map[string]bool
	insmod  func(file string) error // finitModule; tests replace it

	mu   sync.Mutex
	mods map[string]*modLoad // module file -> its load, once started
}

// modLoad is one module file's load: done is closed once it is loaded or has failed,
// err (set before done is closed) is its finit_module error or that of a dependency.
type modLoad struct {
	done chan struct{}
	err  error
}

func newModLoader(dir string) (*modLoader, error) {
	l := &modLoader{dir: dir, deps: map[string][]string{}, softPre: map[string][]string{}, byName: map[string]string{}, builtin: map[string]bool{}, mods: map[string]*modLoad{}}
	l.insmod = l.finitModule
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
	if b, err := os.ReadFile(filepath.Join(dir, "modules.softdep")); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			w := strings.Fields(line)
			if len(w) < 4 || w[0] != "softdep" || w[2] != "pre:" {
				continue
			}
			for _, p := range w[3:] {
				l.softPre[modName(w[1])] = append(l.softPre[modName(w[1])], modName(p))
			}
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

// file returns the module file of the module called name, "" for a module built into
// the kernel, or an error naming a module that is neither.
func (l *modLoader) file(name string) (string, error) {
	n := modName(name)
	if file, ok := l.byName[n]; ok {
		return file, nil
	}
	if l.builtin[n] {
		return "", nil
	}
	return "", fmt.Errorf("load module %s: not in modules.dep", n)
}

// plan returns, for the modules called names and everything they need that no earlier
// start began, each module file with the files that must be loaded before it (started
// earlier or not). Built-in modules are skipped. l.mu must be held.
func (l *modLoader) plan(names []string) (map[string][]string, error) {
	p := map[string][]string{}
	var add func(file string)
	add = func(file string) {
		if _, ok := p[file]; ok || l.mods[file] != nil {
			return
		}
		p[file] = append([]string{}, l.deps[file]...)
		for _, d := range l.deps[file] {
			add(d)
		}
	}
	for _, n := range names {
		file, err := l.file(n)
		if err != nil {
			return nil, err
		}
		if file != "" {
			add(file)
		}
	}
	// Soft dependencies order modules that are loaded anyway; they add nothing.
	for file := range p {
		for _, pre := range l.softPre[modName(file)] {
			if pf, ok := l.byName[pre]; ok {
				if _, planned := p[pf]; planned || l.mods[pf] != nil {
					p[file] = append(p[file], pf)
				}
			}
		}
	}
	return p, nil
}

// start begins loading the modules called names and the dependencies no earlier call
// began, one goroutine per module file, each calling finit_module once the files it
// depends on are loaded; it returns without waiting. A module whose dependency failed
// is not tried and fails with the dependency's error. The error returned is for a name
// that is neither in modules.dep nor built in; then nothing is started.
func (l *modLoader) start(names []string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	p, err := l.plan(names)
	if err != nil {
		return err
	}
	for file := range p {
		l.mods[file] = &modLoad{done: make(chan struct{})}
	}
	for file, deps := range p {
		m := l.mods[file]
		before := make([]*modLoad, 0, len(deps))
		for _, d := range deps {
			if dm := l.mods[d]; dm != nil { // always: plan adds every dependency not started before
				before = append(before, dm)
			}
		}
		go func() {
			defer close(m.done)
			for _, d := range before {
				if <-d.done; d.err != nil {
					m.err = d.err // one root cause; the dependents are not tried
					return
				}
			}
			m.err = l.insmod(file)
		}()
	}
	return nil
}

// wait blocks until the modules called names, started by start, are loaded (and so
// their dependencies) and returns the error of the first of them, in names order, that
// failed. Built-in modules are skipped; a name start was not given fails at once.
func (l *modLoader) wait(names []string) error {
	for _, n := range names {
		file, err := l.file(n)
		if err != nil {
			return err
		}
		if file == "" {
			continue
		}
		l.mu.Lock()
		m := l.mods[file]
		l.mu.Unlock()
		if m == nil {
			return fmt.Errorf("wait for module %s: not started", modName(n))
		}
		if <-m.done; m.err != nil {
			return m.err
		}
	}
	return nil
}

// waitAll blocks until every module started so far is loaded or has failed, and
// returns the error of the first failed one in file name order.
func (l *modLoader) waitAll() error {
	l.mu.Lock()
	files := make([]string, 0, len(l.mods))
	for f := range l.mods {
		files = append(files, f)
	}
	l.mu.Unlock()
	sort.Strings(files)
	var first error
	for _, f := range files {
		l.mu.Lock()
		m := l.mods[f]
		l.mu.Unlock()
		if <-m.done; m.err != nil && first == nil {
			first = m.err
		}
	}
	return first
}

// finitModule loads one module file; a module that is already loaded is not an error.
func (l *modLoader) finitModule(file string) error {
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
	return nil
}
