package tlsterm

import (
	"strings"
	"testing"
	"unsafe"

	"brood.dev/brood/helper/api"
)

// inArena reports whether s's bytes lie inside one of b's arena mappings.
func inArena(b *Bindings, s string) bool {
	addr := uintptr(unsafe.Pointer(unsafe.StringData(s)))
	for _, m := range b.Mappings() {
		if addr >= m[0] && addr+uintptr(len(s)) <= m[0]+m[1] {
			return true
		}
	}
	return false
}

// TestBindingsInLockedArena: every real value of the table, those loaded and those a
// refresh adds, is held in the table's locked arena, not in the strings it was given;
// a refreshed value over api.MaxSecretValue is refused; Wipe zeroes every value.
func TestBindingsInLockedArena(t *testing.T) {
	b, err := NewBindings(testSecrets())
	if err != nil {
		t.Fatal(err)
	}
	if err := b.LockErr(); err != nil {
		t.Fatalf("table not locked under this process's RLIMIT_MEMLOCK: %v", err)
	}
	list, _ := b.snapshot()
	for i, e := range list {
		given := testSecrets().Bindings[i].Value
		if e.value != given || !inArena(b, e.value) {
			t.Errorf("%s: value in the arena %v, equal to the given one %v", e.name, inArena(b, e.value), e.value == given)
		}
	}
	const fresh = "fresh-access-token-0123456789abcdefghij"
	if _, ok := b.Rotate(loginName, api.RoleAccess, strings.Clone(fresh)); !ok {
		t.Fatal("Rotate refused")
	}
	if v, _ := b.Value(loginName, api.RoleAccess); v != fresh || !inArena(b, v) {
		t.Errorf("refreshed value %q in the arena: %v", v, inArena(b, v))
	}
	if _, ok := b.Rotate(loginName, api.RoleAccess, strings.Repeat("a", api.MaxSecretValue+1)); ok {
		t.Error("Rotate took a value over api.MaxSecretValue")
	}
	b.Wipe()
	list, _ = b.snapshot()
	for _, e := range list {
		if strings.Trim(e.value, "\x00") != "" {
			t.Errorf("%s after Wipe: %q, want zeros", e.name, e.value)
		}
	}
}

// TestRotateFreesDropped: the value of the refreshed entry dropped after maxRotated
// refreshes is zeroed in the arena.
func TestRotateFreesDropped(t *testing.T) {
	b, err := NewBindings(testSecrets())
	if err != nil {
		t.Fatal(err)
	}
	b.Rotate(loginName, api.RoleAccess, "rotated-first-0123456789abcdefghijklmnop")
	first, _ := b.Value(loginName, api.RoleAccess)
	for i := range maxRotated {
		if _, ok := b.Rotate(loginName, api.RoleAccess, "rotated-"+strings.Repeat("x", i+1)+"-0123456789abcdefghij"); !ok {
			t.Fatal("Rotate refused")
		}
	}
	if strings.Trim(first, "\x00") != "" {
		t.Errorf("the dropped refreshed value still reads %q", first)
	}
}
