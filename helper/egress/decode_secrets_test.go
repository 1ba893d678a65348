package egress

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/internal/lockedmem"
)

// TestDecodeSecrets: the process's decoding of the bindings message gives back exactly
// what the daemon encoded (a value with every printable ASCII byte but space, the ones
// json.Marshal escapes among them), with every value's bytes in the locked arena, not in
// the Go heap; Wipe zeroes them. A \u escape outside ASCII is refused without the value.
func TestDecodeSecrets(t *testing.T) {
	var all strings.Builder
	for c := byte('!'); c <= '~'; c++ {
		all.WriteByte(c)
	}
	want := procSecrets{Secrets: api.SessionSecrets{Bindings: []api.SecretBinding{
		{Name: "$API_KEY", Placeholder: phAPI, Value: all.String() + `<&>"\/`, Hosts: []string{"api.bound.test"}},
		{Name: "login refresh", Placeholder: phOther, Value: canaryOther, Hosts: []string{"auth.bound.test"},
			Login: "l", Role: api.RoleRefresh, TokenURLs: []string{"https://auth.bound.test/token"}},
	}, WriteBack: true}, TestRoots: []byte("roots")}
	// Every field of the message is set, so a field decodeSecrets forgets (its wire
	// struct is written by hand) fails the comparison below.
	for _, v := range []reflect.Value{reflect.ValueOf(want), reflect.ValueOf(want.Secrets)} {
		for i := range v.NumField() {
			if v.Field(i).IsZero() {
				t.Fatalf("want.%s is not set", v.Type().Field(i).Name)
			}
		}
	}
	data, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	mem := lockedmem.New()
	got, err := decodeSecrets(data, mem)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded %+v\nwant %+v", got, want)
	}
	for _, b := range got.Secrets.Bindings {
		addr := uintptr(unsafe.Pointer(unsafe.StringData(b.Value)))
		in := false
		for _, m := range mem.Mappings() {
			in = in || addr >= m[0] && addr+uintptr(len(b.Value)) <= m[0]+m[1]
		}
		if !in {
			t.Errorf("%s: value not in the arena", b.Name)
		}
	}
	mem.Wipe()
	for _, b := range got.Secrets.Bindings {
		if strings.Trim(b.Value, "\x00") != "" {
			t.Errorf("%s after Wipe: %q", b.Name, b.Value)
		}
	}
	bad := []byte(`{"secrets":{"bindings":[{"name":"$K","value":"sk-\u00e9-secretpart"}]}}`)
	if _, err := decodeSecrets(bad, lockedmem.New()); err == nil || !strings.Contains(err.Error(), "$K") || strings.Contains(err.Error(), "secretpart") {
		t.Errorf("non-ASCII escape: %v", err)
	}
}
