package api

import (
	"encoding/json"
	"strings"

	"brood.dev/brood/sandbox"
	"testing"
)

// TestEnumWireValues pins the JSON of every wire enum value: the protocol (Version 1)
// stays compatible with helpers and clients built before the values were typed.
func TestEnumWireValues(t *testing.T) {
	for _, tc := range []struct {
		v    any
		want string
	}{
		{Session{State: SessionCreated}, `"state":"created"`},
		{Session{State: SessionRunning}, `"state":"running"`},
		{Session{State: SessionStopped}, `"state":"stopped"`},
		{VMExit{Outcome: OutcomePoweroff}, `{"outcome":"poweroff"}`},
		{VMExit{Outcome: OutcomeStopped}, `{"outcome":"stopped"}`},
		{VMExit{Outcome: OutcomeTimeout}, `{"outcome":"timeout"}`},
		{VMExit{Outcome: OutcomeFailed}, `{"outcome":"failed"}`},
		{Landlock{Mode: LandlockEnforced}, `"mode":"enforced"`},
		{Landlock{Mode: LandlockDegraded}, `"mode":"degraded"`},
		{Landlock{Mode: LandlockOff}, `"mode":"off"`},
		{VMInfo{Accel: sandbox.AccelKVM}, `"accel":"kvm"`},
		{Capabilities{Accel: sandbox.AccelTCG}, `"accel":"tcg"`},
	} {
		b, err := json.Marshal(tc.v)
		if err != nil {
			t.Fatal(err)
		}
		if !json.Valid(b) || !strings.Contains(string(b), tc.want) {
			t.Errorf("%T: %s, want it to hold %s", tc.v, b, tc.want)
		}
	}
	// Call names: every call in CallFDs, with its wire name.
	calls := map[Call]string{CallHello: "hello", CallCreateSession: "create_session", CallListSessions: "list_sessions",
		CallDestroySession: "destroy_session", CallDoctor: "doctor", CallStartVM: "start_vm", CallAttach: "attach",
		CallStopVM: "stop_vm", CallWaitVM: "wait_vm", CallResolvePolicy: "resolve_policy", CallListImages: "list_images", CallBuildImage: "build_image",
		CallEgressLog: "egress_log", CallRefreshedLogins: "refreshed_logins"}
	if len(calls) != len(CallFDs) {
		t.Errorf("%d calls pinned, CallFDs has %d", len(calls), len(CallFDs))
	}
	for c, want := range calls {
		if _, ok := CallFDs[c]; !ok {
			t.Errorf("call %q not in CallFDs", c)
		}
		b, _ := json.Marshal(Request{Call: c})
		if string(b) != `{"call":"`+want+`"}` {
			t.Errorf("call %s: %s", want, b)
		}
	}
	// A message from an older peer decodes into the typed constants.
	var s Session
	if err := DecodeArgs(json.RawMessage(`{"id":"0000abcd","owner":1000,"state":"stopped","tap":"brd0000abcd","created":1}`), &s); err != nil || s.State != SessionStopped {
		t.Errorf("decode session: %+v, %v", s, err)
	}
	var e VMExit
	if err := DecodeArgs(json.RawMessage(`{"outcome":"timeout"}`), &e); err != nil || e.Outcome != OutcomeTimeout {
		t.Errorf("decode exit: %+v, %v", e, err)
	}
}
