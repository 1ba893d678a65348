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
// names). Independent modules load concurrently: each module waits only for what it
// depends on, so the waits inside the kernel's module loading (RCU grace periods,
// async probes, workqueues) overlap instead of adding up.
type modLoader struct {
	dir     string               // lib/modules/<release>
	logf    func(string, ...any) // per-module debug log, or nil
	deps    map[string][]string  // module file -> dependency files
	softPre map[string][]string  // module name -> module names to load first
	byName  map[string]string    // module name -> file
	builtin map[string]bool
	insmod  func(file string) error // finitModule; tests replace it
	loaded  map[string]bool         // module files loaded by earlier load calls
}

func newModLoader(dir string) (*modLoader, error) {
	l := &modLoader{dir: dir, deps: map[string][]string{}, softPre: map[string][]string{}, byName: map[string]string{}, builtin: map[string]bool{}, loaded: map[string]bool{}}
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

// plan returns, for the modules called names and everything they need, each module
// file with the files that must be loaded before it. Built-in modules are skipped.
func (l *modLoader) plan(names []string) (map[string][]string, error) {
	p := map[string][]string{}
	var add func(file string)
	add = func(file string) {
		if _, ok := p[file]; ok || l.loaded[file] {
			return
		}
		for _, d := range l.deps[file] {
			if !l.loaded[d] {
				p[file] = append(p[file], d)
			}
		}
		if p[file] == nil {
			p[file] = []string{}
		}
		for _, d := range l.deps[file] {
			add(d)
		}
	}
	for _, n := range names {
		n = modName(n)
		file, ok := l.byName[n]
		if !ok {
			if l.builtin[n] {
				continue
			}
			return nil, fmt.Errorf("load module %s: not in modules.dep", n)
		}
		add(file)
	}
	// Soft dependencies order modules that are loaded anyway; they add nothing.
	for file := range p {
		for _, pre := range l.softPre[modName(file)] {
			if pf, ok := l.byName[pre]; ok {
				if _, loaded := p[pf]; loaded {
					p[file] = append(p[file], pf)
				}
			}
		}
	}
	return p, nil
}

// load loads the modules called names and their dependencies not loaded by an earlier
// call, one goroutine per module file, each starting once its dependencies are loaded. Modules depending on a
// failed one are not tried; the error returned is a failed finit_module (of the first
// failed file in name order when several failed).
func (l *modLoader) load(names []string) error {
	p, err := l.plan(names)
	if err != nil {
		return err
	}
	done := map[string]chan struct{}{}
	failed := map[string]bool{} // module files that failed or whose dependency did
	errs := map[string]error{}  // module files whose finit_module failed
	var mu sync.Mutex
	for file := range p {
		done[file] = make(chan struct{})
	}
	var wg sync.WaitGroup
	for file, deps := range p {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(done[file])
			for _, d := range deps {
				<-done[d]
				mu.Lock()
				f := failed[d]
				failed[file] = f
				mu.Unlock()
				if f {
					return
				}
			}
			if err := l.insmod(file); err != nil {
				mu.Lock()
				failed[file], errs[file] = true, err
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for file := range p {
		if !failed[file] {
			l.loaded[file] = true
		}
	}
	files := make([]string, 0, len(errs))
	for f := range errs {
		files = append(files, f)
	}
	sort.Strings(files)
	for _, f := range files {
		return errs[f] // one root cause; its dependents were not tried
	}
	return nil
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
