package helper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/landlock-lsm/go-landlock/landlock"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"

	"brood.dev/brood/helper/landlockabi"
	"brood.dev/brood/internal/hostexec"
	"brood.dev/brood/sandbox/oci"
	"brood.dev/brood/sandbox/ociref"
)

// unpackDir is the unpacker's work directory: descriptor 3, inherited from `image pull`.
const unpackDir = "/proc/self/fd/3"

// unpackRO are the files the unpacker reads besides its work directory: /etc for the
// resolver (resolv.conf, hosts, nsswitch.conf) and the CA bundle (/etc/ssl/certs), and
// the CA certificates its symlinks point to.
var unpackRO = []string{"/etc", "/usr/share/ca-certificates", "/usr/local/share/ca-certificates"}

// unpackStage2 is the argument of the unpacker's second stage.
const unpackStage2 = "confined"

// unpackMain is `broodd-helper image-unpack`, started by pullImage as unpackUID in a new
// PID namespace. There it is process 1, which only starts its second stage (`image-unpack
// confined`, with the same stdin, stdout, stderr and descriptor 3) and waits for it, so
// that when it exits the kernel kills whatever the second stage left behind. (It cannot
// confine itself: setting no_new_privs on every thread signals each thread, which hangs
// in a namespace's process 1.) The second stage sets no_new_privs, confines its
// filesystem access with Landlock to reading unpackRO and writing unpackDir (network
// access stays: it speaks to the registry), reads one unpackRequest on stdin, pulls into
// unpackDir/rootfs recording owners, and writes an unpackAnswer on stdout. Exit code 0
// pulled, 1 not.
func unpackMain(args []string) int {
	if len(args) == 0 && os.Getuid() != 0 {
		return unpackStage1()
	}
	if len(args) == 1 && args[0] == unpackStage2 {
		args = nil
	}
	ans := unpackAnswer{UID: os.Getuid(), GID: os.Getgid()}
	err := unpack(args, &ans)
	if err != nil {
		ans.Error, ans.Policy = err.Error(), errors.Is(err, ociref.ErrPolicy)
	}
	if e := json.NewEncoder(os.Stdout).Encode(&ans); e != nil || err != nil {
		return 1
	}
	return 0
}

// unpackStage1 runs the second stage as its child and returns its exit code.
func unpackStage1() int {
	exe, err := os.Executable()
	if err == nil {
		cmd := hostexec.Self(exe, UnpackSubcommand, unpackStage2)
		cmd.Env = os.Environ() // the first stage's environment: proxy variables only
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		cmd.ExtraFiles = []*os.File{os.NewFile(3, unpackDir)}
		err = cmd.Run()
		var ee *hostexec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "broodd-helper %s: start the second stage: %v\n", UnpackSubcommand, err)
		return 1
	}
	return 0
}

func unpack(args []string, ans *unpackAnswer) error {
	if len(args) != 0 || os.Getuid() == 0 {
		return fmt.Errorf("%s: takes no arguments and never runs as root (it is started by image pull)", UnpackSubcommand)
	}
	if err := confineUnpacker(ans); err != nil {
		return err
	}
	var req unpackRequest
	if err := json.NewDecoder(io.LimitReader(os.Stdin, 1<<20)).Decode(&req); err != nil {
		return fmt.Errorf("%s: request: %w", UnpackSubcommand, err)
	}
	keep := false
	p, err := oci.Pull(context.Background(), req.Ref, unpackDir+"/rootfs", oci.Options{
		Policy: req.Policy, KeepOwners: &keep, RecordOwners: true, Log: os.Stderr,
	})
	ans.Pulled = p
	return err
}

// confineUnpacker sets no_new_privs on every thread and restricts filesystem access
// (landlock.Config.RestrictPaths: only filesystem rights are handled) at the pinned ABI,
// best effort below it; it records both in ans as the kernel reports them.
func confineUnpacker(ans *unpackAnswer) error {
	if err := llsys.AllThreadsPrctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_NO_NEW_PRIVS): %w", err)
	}
	nnp, err := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0)
	ans.NoNewPrivs = err == nil && nnp == 1
	abi, _ := landlockabi.Kernel()
	cfg := landlockabi.Config
	if abi < landlockabi.Pinned {
		fmt.Fprintf(os.Stderr, "broodd-helper %s: landlock ABI %d < %d: confinement DEGRADED\n", UnpackSubcommand, abi, landlockabi.Pinned)
		cfg = cfg.BestEffort()
	}
	err = cfg.RestrictPaths(
		landlock.RODirs(unpackRO...).IgnoreIfMissing(),
		landlock.RWDirs(unpackDir),
		landlock.RWFiles("/dev/null"),
	)
	if err != nil {
		return fmt.Errorf("landlock restrict %s: %w", UnpackSubcommand, err)
	}
	ans.Landlock = min(abi, landlockabi.Pinned)
	return nil
}
