package frontend

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"brood.dev/brood/netpolicy"
)

func init() { commands = append(commands, newPolicyCommand) }

// noEgressNote heads `brood policy show` without --egress: the merged policy below is
// what the layers allow, but a session started without --egress has no network at all.
const noEgressNote = "without --egress, brood run gives the VM no network device; with --egress PROFILE, these layers apply:"

func newPolicyCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "policy",
		Short: "Inspect the egress policy",
		Args:  cobra.NoArgs,
	}
	var (
		flags      egressFlags
		agent      string
		workspace  string
		systemPath string
	)
	show := &cobra.Command{
		Use:   "show",
		Short: "Print the effective egress profile and hosts, with the layer that set each",
		Long: `show merges the egress layers the way the helper does, tighten-only: the system policy
(` + netpolicy.SystemPolicyPath + `, set by IT), your config ($XDG_CONFIG_HOME/brood/config.toml,
[egress] table), the workspace's .brood.toml ([egress]; it may remove hosts, never add them)
and the flags, plus the agent's LLM provider hosts and the package registries this host is
configured to use: system-wide (apt sources, /etc/npmrc) and your own (npm, pnpm, yarn, pip,
cargo, go configuration files and variables, read without running any tool), which counts as
hosts you added (a system policy that forbids --allow-host drops them). Each line names the
layer that set it; a discovered registry names its file, variable or the tool's default. When
your home directory is inside the workspace, its configuration files are workspace content:
one is used only when review never applies a change to it unnamed (the line says so), and is
otherwise listed as "not read".`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			userPath, err := userConfigPath()
			if err != nil {
				return err
			}
			disc, notes := discoverAll(cmd.Context(), workspace)
			eff, err := effectivePolicy(systemPath, userPath, workspace, agent, &flags, disc)
			if err != nil {
				if errors.Is(err, netpolicy.ErrLoosen) || errors.Is(err, netpolicy.ErrAllowHostForbidden) {
					return refusedErr(err)
				}
				return err
			}
			if flags.profile == "" {
				fmt.Fprintln(cmd.OutOrStdout(), noEgressNote)
			}
			fmt.Fprint(cmd.OutOrStdout(), eff.String())
			for _, n := range notes {
				if strings.HasPrefix(n.Why, netpolicy.WorkspaceNotRead) {
					fmt.Fprintf(cmd.OutOrStdout(), "not read\t%s\t(%s)\n", n.What, n.Why)
				}
			}
			fmt.Fprintln(cmd.OutOrStdout())
			return nil
		},
	}
	flags.register(show.Flags())
	show.Flags().StringVar(&agent, "agent", "shell", "the agent whose LLM provider hosts to include")
	show.Flags().StringVar(&workspace, "workspace", ".", "workspace directory (its .brood.toml)")
	show.Flags().StringVar(&systemPath, "system-policy", netpolicy.SystemPolicyPath, "system policy file")
	show.Flags().MarkHidden("system-policy")
	root.AddCommand(show)
	return root
}
