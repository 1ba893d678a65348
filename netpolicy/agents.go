package netpolicy

import "slices"

// agentHosts are the LLM provider API hosts of the agents brood knows (the built-in
// agents of `brood run`, frontend/cli/agents.go). The helper takes an agent's hosts from this
// table or its own configuration, never from the client, which could otherwise name any
// host as its "provider".
var agentHosts = map[string][]string{
	"claude-code": {"api.anthropic.com"},
	"codex":       {"api.openai.com"},
	"opencode":    {"api.anthropic.com", "api.openai.com", "openrouter.ai"},
	"gemini":      {"generativelanguage.googleapis.com"},
	"hermes":      {"inference-api.nousresearch.com", "openrouter.ai", "api.openai.com"},
	"shell":       {},
}

// BuiltinAgentHosts returns the provider hosts of a built-in agent (443/tcp each), and
// whether agent is one. An unknown agent has none: under Locked it reaches nothing.
func BuiltinAgentHosts(agent string) ([]string, bool) {
	h, ok := agentHosts[agent]
	return slices.Clone(h), ok
}
