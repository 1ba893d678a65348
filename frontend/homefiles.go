package frontend

import (
	"context"
	"fmt"
	"slices"

	"golang.org/x/crypto/ssh"

	"brood.dev/brood/frontend/diff"
	"brood.dev/brood/frontend/sshclient"
	"brood.dev/brood/helper/api"
	"brood.dev/brood/sandbox/guestcfg"
)

// prepareHome prints the spec's notes and writes its HomeFiles into the agent's home
// over the session's SSH connection, before the agent starts. It returns the first write
// error, naming the file.
func (v *runningVM) prepareHome(ctx context.Context, client *ssh.Client) error {
	for _, n := range v.spec.Notes {
		v.prog.Printf("%s", diff.Escape(n))
	}
	if len(v.spec.HomeFiles) == 0 {
		return nil
	}
	if err := sshclient.PutHomeFiles(ctx, client, v.spec.HomeFiles); err != nil {
		return fmt.Errorf("prepare the agent's home: %w", err)
	}
	v.prog.Printf("agent home: %d file(s) written", len(v.spec.HomeFiles))
	return nil
}

// trustSessionCA makes the guest trust the session CA of info (StartVM's answer when the
// run sent secret bindings) and returns the agent's environment: the spec's, plus the
// variables that point TLS stacks at the CA (guestcfg.TrustEnv; a name the spec sets is
// overridden). Without a CA it returns the spec's environment as it is.
func (v *runningVM) trustSessionCA(ctx context.Context, client *ssh.Client, info api.VMInfo) ([][2]string, error) {
	if info.SecretsCA == "" {
		return v.spec.Env, nil
	}
	if err := sshclient.PutTrustCA(ctx, client, []byte(info.SecretsCA)); err != nil {
		return nil, fmt.Errorf("prepare the guest for placeholders: %w", err)
	}
	v.prog.Printf("secrets: the VM trusts this session's CA (its key stays in the egress process)")
	return withTrustEnv(v.spec.Env), nil
}

// withTrustEnv returns env with guestcfg.TrustEnv's variables set in place of any of the
// same name, those appended in TrustEnv's order.
func withTrustEnv(env [][2]string) [][2]string {
	trust := guestcfg.TrustEnv()
	out := make([][2]string, 0, len(env)+len(trust))
	for _, kv := range env {
		if !slices.ContainsFunc(trust, func(t [2]string) bool { return t[0] == kv[0] }) {
			out = append(out, kv)
		}
	}
	return append(out, trust...)
}
