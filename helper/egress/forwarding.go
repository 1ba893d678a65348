package egress

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"brood.dev/brood/internal/atomicfile"
	"brood.dev/brood/netpolicy/nftrules"
)

// ForwardingLinks is a Links that also reads and sets an interface's IPv4 forwarding
// (NetlinkLinks, FakeLinks). Only with one does Manager switch an uplink's forwarding back
// when its last session ends; with a plain Links it switches it on and leaves it.
type ForwardingLinks interface {
	Links
	// Forwarding reports net.ipv4.conf.<name>.forwarding.
	Forwarding(name string) (bool, error)
	// SetForwarding sets net.ipv4.conf.<name>.forwarding (that interface only).
	SetForwarding(name string, on bool) error
}

// ForwardingRecord is the file, in the decision-log directory, that holds the uplinks'
// forwarding from before brood switched it on. It is written before the first change and
// removed once everything is restored, so a helper that died leaves it for the next start
// or `broodd-helper --cleanup` (RestoreForwarding).
const ForwardingRecord = "forwarding.json"

// priorForwarding is one uplink's forwarding before brood changed it.
type priorForwarding struct {
	V4 bool `json:"v4"` // net.ipv4.conf.<if>.forwarding
	// V6 is net.ipv6.conf.<if>.force_forwarding (nil: IPv6 not changed).
	V6 *bool `json:"v6,omitempty"`
	// HoldV6: IPv6 did not forward from this uplink (force_forwarding and the global switch
	// off), so tap_forward drops what it would now forward to other interfaces.
	HoldV6 bool `json:"hold_v6,omitempty"`
}

// holdUplink records name's forwarding (the first time only, persisted before any change)
// and switches it on. The caller holds e.fwdMu.
func (e *Manager) holdUplink(fl ForwardingLinks, name string) error {
	if _, ok := e.prior[name]; !ok {
		var p priorForwarding
		var err error
		if p.V4, err = fl.Forwarding(name); err != nil {
			return err
		}
		if e.IPv6 != nil {
			v6, err := e.IPv6.Forwarding(name)
			if err != nil {
				return err
			}
			global, err := e.IPv6.GlobalForwarding()
			if err != nil {
				return err
			}
			p.V6, p.HoldV6 = &v6, !v6 && !global
		}
		e.prior[name] = p
		if err := e.saveRecord(); err != nil {
			delete(e.prior, name)
			return err
		}
	}
	return e.forwarding(name)
}

// heldLists returns the uplinks whose forwarding was off before brood (IPv4, IPv6).
func (e *Manager) heldLists() (v4, v6 []string) {
	for name, p := range e.prior {
		if !p.V4 {
			v4 = append(v4, name)
		}
		if p.HoldV6 {
			v6 = append(v6, name)
		}
	}
	slices.Sort(v4)
	slices.Sort(v6)
	return v4, v6
}

// saveRecord writes e.prior to the ForwardingRecord (atomically, mode 0600).
func (e *Manager) saveRecord() error {
	b, err := json.Marshal(e.prior)
	if err != nil {
		return fmt.Errorf("encode uplink forwarding record: %w", err)
	}
	return atomicfile.WriteBytes(filepath.Join(e.logDir, ForwardingRecord), b)
}

// releaseUplinks restores every recorded uplink, empties the held sets and removes the
// record, when no session is left. The caller holds e.fwdMu.
func (e *Manager) releaseUplinks() error {
	e.mu.Lock()
	busy := len(e.sessions) > 0
	e.mu.Unlock()
	if busy || len(e.prior) == 0 {
		return nil
	}
	errs := []error{e.fw.HoldUplinks(nil, nil)}
	fl, _ := e.links.(ForwardingLinks)
	errs = append(errs, restore(fl, e.IPv6, e.prior))
	if err := os.Remove(filepath.Join(e.logDir, ForwardingRecord)); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	e.log.Info("audit: uplink forwarding restored", "uplinks", e.prior)
	e.prior = map[string]priorForwarding{}
	return errors.Join(errs...)
}

// restore sets each uplink of prior back to its recorded forwarding; an uplink that is
// gone is skipped (its settings went with it).
func restore(fl ForwardingLinks, v6 IPv6Forwarder, prior map[string]priorForwarding) error {
	var errs []error
	for name, p := range prior {
		if fl != nil {
			if err := fl.SetForwarding(name, p.V4); err != nil && !errors.Is(err, errNoLink) {
				errs = append(errs, err)
			}
		}
		if p.V6 != nil && v6 != nil {
			if err := v6.SetForwarding(name, *p.V6); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// RestoreForwarding restores the uplinks' forwarding recorded in dir's ForwardingRecord
// by a helper that did not (it died, or the unit stopped with sessions) and removes the
// record; no record is not an error. v6 may be nil (IPv6 settings are then left). It
// returns the uplinks restored.
func RestoreForwarding(dir string, links ForwardingLinks, v6 IPv6Forwarder) ([]string, error) {
	path := filepath.Join(dir, ForwardingRecord)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read uplink forwarding record: %w", err)
	}
	var prior map[string]priorForwarding
	if err := json.Unmarshal(b, &prior); err != nil {
		return nil, fmt.Errorf("parse uplink forwarding record %s: %w", path, err)
	}
	for name := range prior {
		if err := nftrules.ValidateIfName(name); err != nil {
			return nil, fmt.Errorf("uplink forwarding record %s: %w", path, err)
		}
	}
	if err := restore(links, v6, prior); err != nil {
		return nil, fmt.Errorf("restore uplink forwarding from %s: %w", path, err)
	}
	var names []string
	for name := range prior {
		names = append(names, name)
	}
	slices.Sort(names)
	return names, os.Remove(path)
}

// errNoLink marks an interface that does not exist.
var errNoLink = errors.New("no such interface")

// Forwarding implements ForwardingLinks: net.ipv4.conf.<name>.forwarding as the kernel
// reports it in the link's IFLA_AF_SPEC → AF_INET → IFLA_INET_CONF (an array of host-endian
// u32, entry i-1 holding devconf i; net/ipv4/devinet.c inet_fill_link_af).
func (l *NetlinkLinks) Forwarding(name string) (bool, error) {
	link, err := l.h.LinkByName(name)
	if err != nil {
		return false, fmt.Errorf("read forwarding of %q: %w: %w", name, errNoLink, err)
	}
	req := nl.NewNetlinkRequest(unix.RTM_GETLINK, 0)
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
	msg.Index = int32(link.Attrs().Index)
	req.AddData(msg)
	msgs, err := req.Execute(unix.NETLINK_ROUTE, unix.RTM_NEWLINK)
	if err != nil || len(msgs) != 1 || len(msgs[0]) < unix.SizeofIfInfomsg {
		return false, fmt.Errorf("read forwarding of %q: RTM_GETLINK: %d messages, %v", name, len(msgs), err)
	}
	conf, err := inetConf(msgs[0][unix.SizeofIfInfomsg:])
	if err != nil {
		return false, fmt.Errorf("read forwarding of %q: %w", name, err)
	}
	off := (ipv4DevconfForwarding - 1) * 4
	if len(conf) < off+4 {
		return false, fmt.Errorf("read forwarding of %q: IFLA_INET_CONF of %d bytes", name, len(conf))
	}
	return binary.NativeEndian.Uint32(conf[off:]) != 0, nil
}

// inetConf returns the IFLA_INET_CONF payload among a link message's attributes.
func inetConf(b []byte) ([]byte, error) {
	attrs, err := nl.ParseRouteAttr(b)
	if err != nil {
		return nil, err
	}
	for _, a := range attrs {
		if a.Attr.Type&^unix.NLA_F_NESTED != unix.IFLA_AF_SPEC {
			continue
		}
		fams, err := nl.ParseRouteAttr(a.Value)
		if err != nil {
			return nil, err
		}
		for _, f := range fams {
			if f.Attr.Type&^unix.NLA_F_NESTED != unix.AF_INET {
				continue
			}
			confs, err := nl.ParseRouteAttr(f.Value)
			if err != nil {
				return nil, err
			}
			for _, c := range confs {
				if c.Attr.Type&^unix.NLA_F_NESTED == unix.IFLA_INET_CONF {
					return c.Value, nil
				}
			}
		}
	}
	return nil, errors.New("no IFLA_INET_CONF (no IPv4 on the interface)")
}

// Forwarding reports net.ipv6.conf.<name>.force_forwarding.
func (c *IPv6Conf) Forwarding(name string) (bool, error) {
	if err := nftrules.ValidateIfName(name); err != nil || name == "all" || name == "default" {
		return false, fmt.Errorf("read IPv6 forwarding of %q: not a single interface: %w", name, ErrConfig)
	}
	return c.readFlag(name + "/" + forceForwarding)
}

// GlobalForwarding reports net.ipv6.conf.all.forwarding (the switch brood never sets).
func (c *IPv6Conf) GlobalForwarding() (bool, error) { return c.readFlag("all/forwarding") }

// readFlag reads a 0/1 sysctl file under the held directory.
func (c *IPv6Conf) readFlag(rel string) (bool, error) {
	fd, err := unix.Openat(int(c.dir.Fd()), rel, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, fmt.Errorf("read %s/%s: %w", IPv6ConfDir, rel, &os.PathError{Op: "openat", Path: IPv6ConfDir + "/" + rel, Err: err})
	}
	f := os.NewFile(uintptr(fd), IPv6ConfDir+"/"+rel)
	defer f.Close()
	buf := make([]byte, 16)
	n, err := f.Read(buf)
	if err != nil {
		return false, fmt.Errorf("read %s/%s: %w", IPv6ConfDir, rel, err)
	}
	return strings.TrimSpace(string(buf[:n])) != "0", nil
}
