package initramfs

import (
	"bufio"
	"bytes"
	"fmt"
	"path"
	"strings"
)

// ModName returns the kernel's name for a module file or name: the base name without
// ".ko" (and a compression suffix) with '-' folded to '_', as the kernel does.
func ModName(s string) string {
	s = path.Base(s)
	if i := strings.Index(s, ".ko"); i >= 0 {
		s = s[:i]
	}
	return strings.ReplaceAll(s, "-", "_")
}

// DepDB is a parsed modules.dep (depmod(8)): for each module file relative to
// lib/modules/<release>, the full closure of files it depends on, in the order where
// the last must be loaded first.
type DepDB struct {
	Deps    map[string][]string // module file -> dependency files
	ByName  map[string]string   // module name -> module file
	Builtin map[string]bool     // module names built into the kernel (modules.builtin)
}

// ParseDepDB parses modules.dep and modules.builtin content.
func ParseDepDB(dep, builtin []byte) (*DepDB, error) {
	db := &DepDB{Deps: map[string][]string{}, ByName: map[string]string{}, Builtin: map[string]bool{}}
	sc := bufio.NewScanner(bytes.NewReader(dep))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		file, deps, ok := strings.Cut(line, ":")
		if !ok || file == "" || strings.Contains(file, "..") || strings.HasPrefix(file, "/") {
			return nil, fmt.Errorf("parse modules.dep line %d %q: malformed", n, line)
		}
		db.Deps[file] = strings.Fields(deps)
		db.ByName[ModName(file)] = file
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("parse modules.dep: %w", err)
	}
	for _, l := range strings.Fields(string(builtin)) {
		db.Builtin[ModName(l)] = true
	}
	return db, nil
}

// Closure returns the module files needed to load names, each dependency before its
// dependents, without duplicates. Built-in modules are skipped; a name that is neither a
// module nor built in yields ErrUnknownModule.
func (db *DepDB) Closure(names []string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	var visit func(file string) error
	visit = func(file string) error {
		if seen[file] {
			return nil
		}
		seen[file] = true
		deps, ok := db.Deps[file]
		if !ok {
			return fmt.Errorf("dependency %s not in modules.dep: %w", file, ErrUnknownModule)
		}
		for i := len(deps) - 1; i >= 0; i-- {
			if err := visit(deps[i]); err != nil {
				return err
			}
		}
		out = append(out, file)
		return nil
	}
	for _, n := range names {
		n = ModName(n)
		file, ok := db.ByName[n]
		if !ok {
			if db.Builtin[n] {
				continue
			}
			return nil, fmt.Errorf("module %q: %w", n, ErrUnknownModule)
		}
		if err := visit(file); err != nil {
			return nil, fmt.Errorf("module %q: %w", n, err)
		}
	}
	return out, nil
}

// Subset returns modules.dep content holding only the lines of files, in that order.
func (db *DepDB) Subset(files []string) []byte {
	var b bytes.Buffer
	for _, f := range files {
		fmt.Fprintf(&b, "%s:", f)
		for _, d := range db.Deps[f] {
			b.WriteString(" " + d)
		}
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// Softdeps returns modules.softdep content (modprobe.d(5) "softdep MODULE pre: ...") for
// the module files in closure, restricted to "pre" dependencies that resolve to modules
// in closure: a name is taken as a module name first, then as an alias from
// modules.alias (softdep, alias). brood-guest has no modprobe to load a soft
// dependency on demand (libcrc32c needs "crc32c" registered first, or loading erofs
// fails), and it loads modules concurrently, so it waits for these before loading the
// module.
func (db *DepDB) Softdeps(closure []string, softdep, alias []byte) []byte {
	in := map[string]bool{}
	for _, f := range closure {
		in[ModName(f)] = true
	}
	aliases := map[string][]string{} // alias -> module names in closure
	for _, line := range strings.Split(string(alias), "\n") {
		w := strings.Fields(line)
		if len(w) == 3 && w[0] == "alias" && in[ModName(w[2])] {
			aliases[w[1]] = append(aliases[w[1]], ModName(w[2]))
		}
	}
	var b bytes.Buffer
	for _, line := range strings.Split(string(softdep), "\n") {
		w := strings.Fields(line)
		if len(w) < 3 || w[0] != "softdep" || !in[ModName(w[1])] {
			continue
		}
		var pre []string
		for i, inPre := 2, false; i < len(w); i++ {
			switch {
			case w[i] == "pre:":
				inPre = true
			case strings.HasSuffix(w[i], ":"):
				inPre = false
			case inPre && in[ModName(w[i])]:
				pre = append(pre, ModName(w[i]))
			case inPre:
				pre = append(pre, aliases[w[i]]...)
			}
		}
		if len(pre) > 0 {
			fmt.Fprintf(&b, "softdep %s pre: %s\n", ModName(w[1]), strings.Join(pre, " "))
		}
	}
	return b.Bytes()
}
