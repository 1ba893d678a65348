package main

import (
	"os"
	"testing"

	"howett.net/plist"

	"brood.dev/brood/helper"
)

// launchdJob is the part of launchd.plist(5) brood's job uses.
type launchdJob struct {
	Label            string
	ProgramArguments []string
	UserName         string
	GroupName        string
	RunAtLoad        bool
	KeepAlive        bool
	Sockets          map[string]struct {
		SockType     string
		SockFamily   string
		SockPathName string
		SockPathMode int
	}
}

// TestLaunchdPlistSockets parses launchd/dev.brood.helper.plist as a property list and
// checks the job: label, the helper program, root, started on demand only (no RunAtLoad,
// no KeepAlive), and exactly one socket, named as the helper takes it, a Unix stream
// socket at /var/run/brood/helper.sock with mode 0660 (root and group brood).
func TestLaunchdPlistSockets(t *testing.T) {
	data, err := os.ReadFile("../launchd/dev.brood.helper.plist")
	if err != nil {
		t.Fatal(err)
	}
	var job launchdJob
	format, err := plist.Unmarshal(data, &job)
	if err != nil {
		t.Fatalf("parse plist: %v", err)
	}
	if format != plist.XMLFormat {
		t.Errorf("plist format %d, want XML", format)
	}
	if job.Label != "dev.brood.helper" || len(job.ProgramArguments) != 1 || job.UserName != "root" || job.GroupName != "brood" {
		t.Errorf("job = %+v", job)
	}
	if job.RunAtLoad || job.KeepAlive {
		t.Errorf("the helper must start on demand only (RunAtLoad %v, KeepAlive %v)", job.RunAtLoad, job.KeepAlive)
	}
	sock, ok := job.Sockets[helper.SocketFDName]
	if len(job.Sockets) != 1 || !ok {
		t.Fatalf("Sockets = %+v, want one entry named %q", job.Sockets, helper.SocketFDName)
	}
	if sock.SockType != "stream" || sock.SockFamily != "Unix" || sock.SockPathName != "/var/run/brood/helper.sock" || sock.SockPathMode != helper.SocketMode {
		t.Errorf("socket %+v, want a Unix stream socket at /var/run/brood/helper.sock, mode %#o", sock, helper.SocketMode)
	}
}
