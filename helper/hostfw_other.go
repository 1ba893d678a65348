//go:build !linux

package helper

import "brood.dev/brood/helper/api"

// hostFirewallProbe: no nftables off Linux (nil: Doctor has no host firewall check).
func hostFirewallProbe() func() api.Check { return nil }
