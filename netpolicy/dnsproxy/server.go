package dnsproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"

	"github.com/miekg/dns"
)

// Server serves one handler on a UDP socket and a TCP listener of the same address.
type Server struct {
	udp, tcp *dns.Server
	errc     chan error
}

// Listen binds UDP and TCP on addr ("host:port"; port 0 picks one free port for both) and
// serves h on them until Close.
func Listen(h dns.Handler, addr string) (*Server, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("listen DNS on %q: %w", addr, err)
	}
	var lastErr error
	for range 8 { // with port 0, the UDP port may be taken for TCP; try another
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			return nil, fmt.Errorf("listen DNS on udp %s: %w", addr, err)
		}
		tcpAddr := addr
		if port == "0" {
			tcpAddr = net.JoinHostPort(host, strconv.Itoa(pc.LocalAddr().(*net.UDPAddr).Port))
		}
		// Plain TCP: Go's default MPTCP listener would bypass Landlock TCP rules
		// (Landlock restricts only classic TCP sockets, not IPPROTO_MPTCP).
		l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", tcpAddr)
		if err != nil {
			pc.Close()
			lastErr = err
			if port == "0" {
				continue
			}
			break
		}
		return Serve(h, pc, l), nil
	}
	return nil, fmt.Errorf("listen DNS on tcp %s: %w", addr, lastErr)
}

// Serve serves h on pc (UDP) and l (TCP) until Close; it returns once both are serving.
func Serve(h dns.Handler, pc net.PacketConn, l net.Listener) *Server {
	s := &Server{errc: make(chan error, 2)}
	started := make(chan struct{}, 2)
	notify := func() { started <- struct{}{} }
	s.udp = &dns.Server{PacketConn: pc, Handler: h, NotifyStartedFunc: notify, UDPSize: ednsSize}
	s.tcp = &dns.Server{Listener: l, Handler: h, NotifyStartedFunc: notify}
	for _, srv := range []*dns.Server{s.udp, s.tcp} {
		go func() { s.errc <- srv.ActivateAndServe() }()
	}
	for range 2 {
		select {
		case <-started:
		case err := <-s.errc:
			s.errc <- err // a server failed to start; Close reports it
			return s
		}
	}
	return s
}

// Addr returns the UDP address (the TCP listener has the same one unless Serve was given
// different sockets).
func (s *Server) Addr() net.Addr { return s.udp.PacketConn.LocalAddr() }

// TCPAddr returns the TCP listener's address.
func (s *Server) TCPAddr() net.Addr { return s.tcp.Listener.Addr() }

// Close stops both servers and waits for in-flight queries.
func (s *Server) Close(ctx context.Context) error {
	err := errors.Join(s.udp.ShutdownContext(ctx), s.tcp.ShutdownContext(ctx))
	if err != nil {
		return fmt.Errorf("close DNS server %s: %w", s.Addr(), err)
	}
	return nil
}
