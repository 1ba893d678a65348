package policywire

import (
	"net/url"
	"slices"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/netpolicy"
)

// NarrowSecrets returns s with every binding's hosts narrowed to the names eff allows
// (Effective.Allowed; a nil eff, a session without network, allows none), and the names
// removed, one "BINDING: HOST" each, for the run's notes. A refresh token keeps only the
// token endpoints whose host is left; with none left it becomes a binding to no host
// (api.RoleKey, no login), which is swapped nowhere. This is where the system policy
// narrows where a secret may go: the helper applies it to what the client sends, so the
// client's own narrowing (frontend/secrets) is not relied on. s is not changed.
func NarrowSecrets(eff *netpolicy.Effective, s api.SessionSecrets) (api.SessionSecrets, []string) {
	out := api.SessionSecrets{WriteBack: s.WriteBack && eff != nil && !eff.LoginWriteBackForbidden}
	var removed []string
	for _, b := range s.Bindings {
		var hosts []string
		for _, h := range b.Hosts {
			if eff != nil && eff.Allowed(h) {
				hosts = append(hosts, h)
			} else {
				removed = append(removed, b.Name+": "+h)
			}
		}
		b.Hosts = hosts
		if b.Role == api.RoleRefresh {
			b.TokenURLs = slices.DeleteFunc(slices.Clone(b.TokenURLs), func(t string) bool {
				u, err := url.Parse(t)
				return err != nil || !slices.Contains(hosts, u.Hostname())
			})
			if len(b.TokenURLs) == 0 {
				b = api.SecretBinding{Name: b.Name, Placeholder: b.Placeholder, Value: b.Value}
			}
		}
		out.Bindings = append(out.Bindings, b)
	}
	return out, removed
}
