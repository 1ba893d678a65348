package tlsterm

import (
	"crypto/x509"
	"fmt"
	"slices"
	"time"

	"brood.dev/brood/helper/api"
)

// NewSession is what the egress process does with the bindings it receives: it loads
// them (NewBindings), makes the session CA for every host a binding names plus inspect
// (further names, exact or "*.suffix", to terminate and search without a secret of their
// own), and returns the Terminator and the CA certificate (PEM) for the guest. rootCAs
// and events are Config's RootCAs and Events. It returns an error when the bindings are
// invalid or name no host and inspect is empty.
func NewSession(s api.SessionSecrets, inspect []string, rootCAs *x509.CertPool, events func(Event)) (*Terminator, []byte, error) {
	b, err := NewBindings(s)
	if err != nil {
		return nil, nil, err
	}
	names := slices.Clone(inspect)
	for _, e := range b.list {
		names = append(names, e.hosts...)
	}
	slices.Sort(names)
	names = slices.Compact(names)
	if len(names) == 0 {
		return nil, nil, fmt.Errorf("start TLS termination: no host to terminate")
	}
	ca, err := NewCA(names, time.Now())
	if err != nil {
		return nil, nil, err
	}
	t, err := New(Config{CA: ca, Bindings: b, RootCAs: rootCAs, Events: events})
	if err != nil {
		return nil, nil, err
	}
	return t, ca.CertPEM(), nil
}

// Covers reports whether t terminates connections for name (its CA covers it): the
// question the SNI gate asks before it hands a connection to Terminate instead of
// splicing it.
func (t *Terminator) Covers(name string) bool { return t.cfg.CA.Covers(name) }

// OnRefresh makes t call f with each login a token response refreshed
// (Bindings.OnRefresh): the real values the opt-in write-back of login files needs.
func (t *Terminator) OnRefresh(f func(api.RefreshedLogin)) { t.cfg.Bindings.OnRefresh(f) }
