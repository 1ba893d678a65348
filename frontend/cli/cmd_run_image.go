package cli

import (
	"github.com/spf13/cobra"
)

func newRunImageCommand() *cobra.Command {
	var f runFlags
	c := &cobra.Command{
		Use:   "run-image IMAGE [flags] -- CMD...",
		Short: "Run one command in a microVM booted from IMAGE, then review its changes",
		Long: `Snapshot the workspace, boot a microVM from IMAGE (an image name, or an OCI digest
reference REGISTRY/REPO@sha256:<hex> pulled with brood image pull), run CMD in /workspace and stop the
VM. When stdin is not a terminal CMD runs without a PTY: its stdout and stderr are
streamed, stdin is passed through, and its exit status is brood's. No environment
variable is forwarded. The review gate still applies: on a terminal brood review runs,
otherwise the diff summary and the commands to review or apply are printed on stderr.`,
		Args: namedArgs(2, -1, "IMAGE", "COMMAND"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() != 1 {
				return usageErr("run-image: usage: brood run-image IMAGE [flags] -- CMD...")
			}
			img, err := storeImage("run-image", args[0]) // imageref.go: a name or a digest reference
			if err != nil {
				return err
			}
			a := Agent{Name: "run-image", Image: img, Command: args[1:], Source: "command line"}
			return runVM(cmd, runRequest{agent: a, argv: args[1:], image: img, ref: refOf(args[0]), flags: f})
		},
	}
	addRunFlags(c, &f, false)
	return c
}
