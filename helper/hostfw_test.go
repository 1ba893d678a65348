//go:build linux

package helper

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/netpolicy/nftrules"
)

// helperNetnsConn returns an nftables connection into the network namespace of pid.
func helperNetnsConn(t *testing.T, pid int) *nftables.Conn {
	t.Helper()
	ns, err := os.Open("/proc/" + strconv.Itoa(pid) + "/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	c, err := nftables.New(nftables.WithNetNSFd(int(ns.Fd())))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// dockerLikeTables adds to c what Docker (iptables-nft) and ufw leave on a host: table ip
// filter with FORWARD (policy drop, jumping to the empty DOCKER-USER) and INPUT (policy
// accept, jumping to ufw-before-input, which drops), and brood's own table with a
// policy-drop forward chain, which is not reported. It returns the FORWARD chain.
func dockerLikeTables(t *testing.T, c *nftables.Conn) (*nftables.Table, *nftables.Chain) {
	t.Helper()
	drop, accept := nftables.ChainPolicyDrop, nftables.ChainPolicyAccept
	filter := c.AddTable(&nftables.Table{Family: nftables.TableFamilyIPv4, Name: "filter"})
	fwd := c.AddChain(&nftables.Chain{Table: filter, Name: "FORWARD", Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &drop})
	user := c.AddChain(&nftables.Chain{Table: filter, Name: "DOCKER-USER"})
	c.AddRule(&nftables.Rule{Table: filter, Chain: fwd, Exprs: []expr.Any{&expr.Verdict{Kind: expr.VerdictJump, Chain: user.Name}}})
	in := c.AddChain(&nftables.Chain{Table: filter, Name: "INPUT", Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &accept})
	ufw := c.AddChain(&nftables.Chain{Table: filter, Name: "ufw-before-input"})
	c.AddRule(&nftables.Rule{Table: filter, Chain: in, Exprs: []expr.Any{&expr.Verdict{Kind: expr.VerdictJump, Chain: ufw.Name}}})
	c.AddRule(&nftables.Rule{Table: filter, Chain: ufw, Exprs: []expr.Any{&expr.Verdict{Kind: expr.VerdictDrop}}})
	own := c.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: nftrules.TableName})
	c.AddChain(&nftables.Chain{Table: own, Name: "forward", Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &drop})
	if err := c.Flush(); err != nil {
		t.Fatalf("add tables: %v", err)
	}
	return filter, fwd
}

// doctorCheck calls Doctor on c and returns the check called name.
func doctorCheck(t *testing.T, c *api.Client, name string) api.Check {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rep, err := c.Doctor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range rep.Checks {
		if ch.Name == name {
			return ch
		}
	}
	t.Fatalf("doctor has no %q check: %+v", name, rep.Checks)
	return api.Check{}
}

// TestDoctorHostFirewall runs the real helper (in its own network namespace): with no
// other table, doctor's host firewall check is clean; after Docker- and ufw-like tables
// appear, it names ip filter FORWARD (policy drop) and INPUT (a drop rule in the chain it
// jumps to) with the rule to add, and not brood's own table; the tables are unchanged by
// it; once FORWARD accepts iifname "brd*", only INPUT is left.
func TestDoctorHostFirewall(t *testing.T) {
	requireRoot(t)
	base, args := helperDirs(t)
	sock := filepath.Join(base, "h.sock")
	hc := startHelperChild(t, nil, nil, append(args, "--listen", sock, "--idle-timeout", "0")...)
	c := waitDial(t, hc, sock, 20*time.Second)
	defer c.Close()
	if ch := doctorCheck(t, c, "host firewall"); !ch.OK || ch.Warn {
		t.Errorf("clean netns: %+v, want ok", ch)
	}

	nc := helperNetnsConn(t, hc.cmd.Process.Pid)
	filter, fwd := dockerLikeTables(t, nc)
	ch := doctorCheck(t, c, "host firewall")
	for _, want := range []string{
		"table ip filter chain FORWARD (forward hook): policy drop may drop brood's guest traffic; to let it through: " +
			"iptables -I FORWARD (or DOCKER-USER where Docker runs) -i brd+ -j ACCEPT and " +
			"iptables -I FORWARD (or DOCKER-USER where Docker runs) -o brd+ -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
		"table ip filter chain INPUT (input hook): 1 drop/reject rules may drop brood's guest traffic; to let it through: " +
			"iptables -I INPUT -i brd+ -p udp --dport 53 -j ACCEPT and iptables -I INPUT -i brd+ -p tcp --dport 53 -j ACCEPT",
		`"Docker and ufw"`,
	} {
		if !strings.Contains(ch.Detail, want) {
			t.Errorf("doctor host firewall lacks %q:\n%s", want, ch.Detail)
		}
	}
	if !ch.OK || !ch.Warn || strings.Contains(ch.Detail, "table inet "+nftrules.TableName) {
		t.Errorf("host firewall = %+v, want a warning without brood's own table", ch)
	}
	// Reading never loosens: FORWARD keeps its policy and its one rule.
	got, err := nc.ListChain(filter, "FORWARD")
	if err != nil || got.Policy == nil || *got.Policy != nftables.ChainPolicyDrop {
		t.Errorf("FORWARD after doctor: %+v, %v", got, err)
	}
	if rules, err := nc.GetRules(filter, fwd); err != nil || len(rules) != 1 {
		t.Errorf("FORWARD rules after doctor: %d, %v", len(rules), err)
	}

	// The rule doctor asks for, in nft form: iifname "brd*" accept.
	nc.InsertRule(&nftables.Rule{Table: filter, Chain: fwd, Exprs: []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte(nftrules.TapPrefix)},
		&expr.Verdict{Kind: expr.VerdictAccept},
	}})
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	ch = doctorCheck(t, c, "host firewall")
	if strings.Contains(ch.Detail, "chain FORWARD") || !strings.Contains(ch.Detail, "chain INPUT") {
		t.Errorf("after the brd* accept rule: %s", ch.Detail)
	}
}
