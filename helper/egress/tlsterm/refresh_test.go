package tlsterm

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"brood.dev/brood/helper/api"
)

// TestOnRefresh: a refresh through the terminator hands the OnRefresh callback the
// login's new real values of the roles the response replaced (an id_token the login has
// no binding for is not among them) and the response's expires_in; a second refresh
// reports the latest values; without a callback nothing is reported (the table still
// rotates); a failed refresh reports nothing.
func TestOnRefresh(t *testing.T) {
	var n int
	var mu sync.Mutex
	status := 200
	auth := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n++
		i, code := n, status
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		fmt.Fprintf(w, `{"access_token":"access-NEW%d-%s","refresh_token":"refresh-NEW%d-%s","id_token":"idtok-NEW-000000000000000000000000","expires_in":%d}`,
			i, strings.Repeat("7", 30), i, strings.Repeat("8", 30), 3600*i)
	}, authHost)
	s := startSession(t, auth, authHost)
	var got []api.RefreshedLogin
	s.term.OnRefresh(func(r api.RefreshedLogin) { mu.Lock(); got = append(got, r); mu.Unlock() })
	refresh := func() {
		t.Helper()
		// The guest holds the latest refresh placeholder; the table maps it.
		list, _ := s.term.cfg.Bindings.snapshot()
		ph := ""
		for _, e := range list {
			if e.login == loginName && e.role == api.RoleRefresh {
				ph = e.placeholder
			}
		}
		r, _ := http.NewRequest("POST", tokenURL, strings.NewReader("grant_type=refresh_token&refresh_token="+ph))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		mustDo(t, s.client(false, authHost), r)
	}
	refresh()
	refresh()
	mu.Lock()
	status = 400
	mu.Unlock()
	refresh()
	if len(got) != 2 {
		t.Fatalf("%d refreshes reported, want 2: %+v", len(got), got)
	}
	for i, r := range got {
		want := map[string]string{api.RoleAccess: fmt.Sprintf("access-NEW%d-%s", i+1, strings.Repeat("7", 30)),
			api.RoleRefresh: fmt.Sprintf("refresh-NEW%d-%s", i+1, strings.Repeat("8", 30))}
		if r.Login != loginName || fmt.Sprint(r.Tokens) != fmt.Sprint(want) || r.ExpiresIn != int64(3600*(i+1)) || r.At.IsZero() {
			t.Errorf("refresh %d reported %+v, want tokens %v, expires_in %d", i+1, r, want, 3600*(i+1))
		}
		if err := r.Validate(); err != nil {
			t.Errorf("refresh %d: %v", i+1, err)
		}
	}
	s.term.OnRefresh(nil)
	mu.Lock()
	status = 200
	mu.Unlock()
	refresh()
	if len(got) != 2 {
		t.Errorf("reported without a callback: %+v", got)
	}
	if v, _ := s.term.cfg.Bindings.Value(loginName, api.RoleAccess); !strings.HasPrefix(v, "access-NEW4-") {
		t.Errorf("the table's access token is %q after the last refresh", v)
	}
}
