package fakeprovider

import (
	"encoding/json"
	"net/http"
	"strings"

	"golang.org/x/net/websocket"
)

// OpenAI is the OpenAI Responses API as codex uses it (codex-rs, wire_api "responses"):
// POST /v1/responses with "stream": true, answered by the server-sent events codex reads
// (response.created, response.output_item.added, response.content_part.added,
// response.output_text.delta and .done, response.content_part.done,
// response.output_item.done, response.completed; the event name is repeated as the JSON
// "type", as OpenAI's stream does). The key arrives as "Authorization: Bearer KEY".
// codex first asks for the same API over a WebSocket (GET /v1/responses with Upgrade:
// websocket; each {"type": "response.create", ...} text message is answered by the same
// events, one JSON text message each): each such message is recorded as a request of
// method "WS" with the upgrade's headers. Every other request (the models list) is 404.
func OpenAI(answer string) *Provider {
	return &Provider{Name: "openai", Hosts: []string{"api.openai.com"}, Answer: answer, handler: serveOpenAI}
}

func serveOpenAI(p *Provider, w http.ResponseWriter, r *http.Request, _ []byte) int {
	return serveResponses(p, w, r, "/v1/responses")
}

// ChatGPT is the ChatGPT backend as codex uses it when signed in with ChatGPT (codex-rs:
// the Responses API under https://chatgpt.com/backend-api/codex, the access token as
// "Authorization: Bearer TOKEN" and the account as "chatgpt-account-id"): the same
// stream as OpenAI's at /backend-api/codex/responses, over HTTP or a WebSocket, and the
// workspace routing codex 0.171 asks for first, GET /backend-api/wham/accounts/check,
// answered with the request's account served by this backend ({"accounts": [{"id",
// "workspace_backend_origin": "https://chatgpt.com", "account_routing_override":
// "NO_CONSTRAINT"}]}, codex-rs app-server workspace_routing.rs). Every other request
// is 404.
func ChatGPT(answer string) *Provider {
	return &Provider{Name: "chatgpt", Hosts: []string{"chatgpt.com"}, Answer: answer, handler: func(p *Provider, w http.ResponseWriter, r *http.Request, _ []byte) int {
		if r.Method == http.MethodGet && r.URL.Path == "/backend-api/wham/accounts/check" {
			acct, _ := json.Marshal(r.Header.Get("chatgpt-account-id"))
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"accounts":[{"id":` + string(acct) + `,"workspace_backend_origin":"https://chatgpt.com","account_routing_override":"NO_CONSTRAINT"}]}`))
			return http.StatusOK
		}
		return serveResponses(p, w, r, "/backend-api/codex/responses")
	}}
}

// serveResponses answers the Responses API at path: a WebSocket upgrade, or a POST.
func serveResponses(p *Provider, w http.ResponseWriter, r *http.Request, path string) int {
	if r.URL.Path == path && strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		return p.serveResponsesWS(w, r)
	}
	if r.Method != http.MethodPost || r.URL.Path != path {
		return notFound(w)
	}
	sse(w, responseEvents(p.Answer))
	return http.StatusOK
}

// OAuthToken is an OAuth 2.0 server at host: a POST to one of the paths of answers
// (the token endpoint, RFC 6749 section 5.1, or Google's /tokeninfo) is answered with
// that path's JSON (SetAnswer replaces one). A refresh token arrives in the body, as a
// form or as JSON. Every other request is 404.
func OAuthToken(host string, answers map[string]string) *Provider {
	p := &Provider{Name: "oauth " + host, Hosts: []string{host}, answers: map[string]string{}}
	for k, v := range answers {
		p.answers[k] = v
	}
	p.handler = func(p *Provider, w http.ResponseWriter, r *http.Request, _ []byte) int {
		p.mu.Lock()
		a, ok := p.answers[r.URL.Path]
		p.mu.Unlock()
		if r.Method != http.MethodPost || !ok {
			return notFound(w)
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(a))
		return http.StatusOK
	}
	return p
}

// SetAnswer makes an OAuthToken provider answer a POST to path with body (JSON).
func (p *Provider) SetAnswer(path, body string) {
	p.mu.Lock()
	p.answers[path] = body
	p.mu.Unlock()
}

// serveResponsesWS answers the Responses API's WebSocket mode until the client closes.
func (p *Provider) serveResponsesWS(w http.ResponseWriter, r *http.Request) int {
	srv := websocket.Server{
		Handshake: func(*websocket.Config, *http.Request) error { return nil }, // no Origin: not a browser
		Handler: func(ws *websocket.Conn) {
			for {
				var msg string
				if err := websocket.Message.Receive(ws, &msg); err != nil {
					return
				}
				var m struct {
					Type string `json:"type"`
				}
				_ = json.Unmarshal([]byte(msg), &m)
				status := http.StatusNotFound
				if m.Type == "response.create" {
					status = http.StatusOK
					for _, e := range responseEvents(p.Answer) {
						if err := websocket.Message.Send(ws, e[1]); err != nil {
							return
						}
					}
				}
				p.record(Request{Method: "WS", Path: r.URL.Path, Host: r.Host, SNI: r.TLS.ServerName, Header: r.Header.Clone(),
					Body: []byte(msg), Status: status})
			}
		},
	}
	srv.ServeHTTP(w, r)
	return http.StatusSwitchingProtocols
}

// responseEvents are the Responses API's stream events of one message holding answer.
func responseEvents(answer string) [][2]string {
	text, _ := json.Marshal(answer)
	part := `{"type":"output_text","text":` + string(text) + `,"annotations":[]}`
	item := `{"id":"msg_fake","type":"message","role":"assistant","status":"completed","content":[` + part + `]}`
	usage := `{"input_tokens":10,"input_tokens_details":{"cached_tokens":0},"output_tokens":5,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":15}`
	ev := func(typ, rest string) [2]string { return [2]string{typ, `{"type":"` + typ + `",` + rest + `}`} }
	return [][2]string{
		ev("response.created", `"response":{"id":"resp_fake","object":"response","status":"in_progress","output":[]}`),
		ev("response.in_progress", `"response":{"id":"resp_fake","object":"response","status":"in_progress","output":[]}`),
		ev("response.output_item.added", `"output_index":0,"item":{"id":"msg_fake","type":"message","role":"assistant","status":"in_progress","content":[]}`),
		ev("response.content_part.added", `"item_id":"msg_fake","output_index":0,"content_index":0,"part":{"type":"output_text","text":"","annotations":[]}`),
		ev("response.output_text.delta", `"item_id":"msg_fake","output_index":0,"content_index":0,"delta":`+string(text)),
		ev("response.output_text.done", `"item_id":"msg_fake","output_index":0,"content_index":0,"text":`+string(text)),
		ev("response.content_part.done", `"item_id":"msg_fake","output_index":0,"content_index":0,"part":`+part),
		ev("response.output_item.done", `"output_index":0,"item":`+item),
		ev("response.completed", `"response":{"id":"resp_fake","object":"response","status":"completed","output":[`+item+`],"usage":`+usage+`}`),
	}
}

// Anthropic is the Anthropic Messages API (docs.anthropic.com, "Streaming Messages"):
// POST /v1/messages with "stream": true gets message_start, content_block_start,
// content_block_delta (text_delta), content_block_stop, message_delta (stop_reason
// end_turn) and message_stop; without "stream" the same message as one JSON object.
// POST /v1/messages/count_tokens answers a count. The key arrives as "x-api-key: KEY".
// Claude Code and opencode's anthropic provider both use it.
func Anthropic(answer string) *Provider {
	return &Provider{Name: "anthropic", Hosts: []string{"api.anthropic.com"}, Answer: answer, handler: serveAnthropic}
}

func serveAnthropic(p *Provider, w http.ResponseWriter, r *http.Request, body []byte) int {
	if r.Method != http.MethodPost {
		return notFound(w)
	}
	var req struct {
		Model  string `json:"model"`
		Stream bool   `json:"stream"`
	}
	_ = json.Unmarshal(body, &req)
	model, _ := json.Marshal(req.Model)
	text, _ := json.Marshal(p.Answer)
	switch r.URL.Path {
	case "/v1/messages/count_tokens":
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"input_tokens":10}`))
		return http.StatusOK
	case "/v1/messages":
	default:
		return notFound(w)
	}
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"id":"msg_fake","type":"message","role":"assistant","model":` + string(model) +
			`,"content":[{"type":"text","text":` + string(text) + `}],"stop_reason":"end_turn","stop_sequence":null,` +
			`"usage":{"input_tokens":10,"output_tokens":5}}`))
		return http.StatusOK
	}
	sse(w, [][2]string{
		{"message_start", `{"type":"message_start","message":{"id":"msg_fake","type":"message","role":"assistant","model":` + string(model) +
			`,"content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":1}}}`},
		{"content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`},
		{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":` + string(text) + `}}`},
		{"content_block_stop", `{"type":"content_block_stop","index":0}`},
		{"message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":5}}`},
		{"message_stop", `{"type":"message_stop"}`},
	})
	return http.StatusOK
}

// Gemini is the Gemini API (ai.google.dev, "generateContent"): POST
// /v1beta/models/MODEL:streamGenerateContent?alt=sse gets one server-sent event with a
// candidate holding the answer and finishReason STOP; :generateContent the same object as
// JSON (for a request asking for JSON output, as the Gemini CLI's model router and
// next-speaker check do, the text is a JSON object naming the flash model and the user as
// next speaker); :countTokens a count. The key arrives as "x-goog-api-key: KEY".
func Gemini(answer string) *Provider {
	return &Provider{Name: "gemini", Hosts: []string{"generativelanguage.googleapis.com"}, Answer: answer, handler: serveGemini}
}

func serveGemini(p *Provider, w http.ResponseWriter, r *http.Request, body []byte) int {
	model, method, ok := strings.Cut(strings.TrimPrefix(r.URL.Path, "/v1beta/models/"), ":")
	if r.Method != http.MethodPost || !ok || !strings.HasPrefix(r.URL.Path, "/v1beta/models/") {
		return notFound(w)
	}
	resp := geminiResponse(p.Answer, model, body)
	switch method {
	case "streamGenerateContent":
		if r.URL.Query().Get("alt") == "sse" {
			sse(w, [][2]string{{"", resp}})
			return http.StatusOK
		}
		resp = "[" + resp + "]"
	case "generateContent":
	case "countTokens":
		resp = `{"totalTokens":10}`
	default:
		return notFound(w)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write([]byte(resp))
	return http.StatusOK
}

// geminiResponse is a GenerateContentResponse (JSON) of model holding answer, or for a
// request body asking for JSON output the router's and next-speaker check's object.
func geminiResponse(answer, model string, body []byte) string {
	var req struct {
		Model            string `json:"model"`
		GenerationConfig struct {
			ResponseMimeType string `json:"responseMimeType"`
		} `json:"generationConfig"`
		Request struct { // Code Assist wraps the request
			GenerationConfig struct {
				ResponseMimeType string `json:"responseMimeType"`
			} `json:"generationConfig"`
		} `json:"request"`
	}
	_ = json.Unmarshal(body, &req)
	if req.GenerationConfig.ResponseMimeType == "application/json" || req.Request.GenerationConfig.ResponseMimeType == "application/json" {
		answer = `{"reasoning":"fake provider","model_choice":"flash","next_speaker":"user"}`
	}
	if model == "" {
		model = req.Model
	}
	text, _ := json.Marshal(answer)
	name, _ := json.Marshal(model)
	return `{"candidates":[{"content":{"parts":[{"text":` + string(text) + `}],"role":"model"},"finishReason":"STOP","index":0}],` +
		`"usageMetadata":{"promptTokenCount":10,"candidatesTokenCount":5,"totalTokenCount":15},"modelVersion":` + string(name) + `}`
}

// CodeAssist is Google's Code Assist API as gemini-cli uses it signed in with Google
// (auth type oauth-personal; gemini-cli code_assist/server.ts, the access token as
// "Authorization: Bearer TOKEN"): POST /v1internal:loadCodeAssist answers a free tier
// and a project; :streamGenerateContent?alt=sse, :generateContent and :countTokens
// answer as the Gemini API does, each response wrapped as {"response": ...}; any other
// /v1internal: method answers {}. Every other request is 404.
func CodeAssist(answer string) *Provider {
	return &Provider{Name: "codeassist", Hosts: []string{"cloudcode-pa.googleapis.com"}, Answer: answer, handler: serveCodeAssist}
}

func serveCodeAssist(p *Provider, w http.ResponseWriter, r *http.Request, body []byte) int {
	method, ok := strings.CutPrefix(r.URL.Path, "/v1internal:")
	if r.Method != http.MethodPost || !ok {
		return notFound(w)
	}
	w.Header().Set("Content-Type", "application/json")
	switch method {
	case "loadCodeAssist":
		w.Write([]byte(`{"currentTier":{"id":"free-tier","name":"Gemini Code Assist for individuals"},"cloudaicompanionProject":"brood-e2e-project"}`))
	case "streamGenerateContent":
		sse(w, [][2]string{{"", `{"response":` + geminiResponse(p.Answer, "", body) + `,"traceId":"fake"}`}})
	case "generateContent":
		w.Write([]byte(`{"response":` + geminiResponse(p.Answer, "", body) + `,"traceId":"fake"}`))
	case "countTokens":
		w.Write([]byte(`{"totalTokens":10}`))
	default:
		w.Write([]byte(`{}`))
	}
	return http.StatusOK
}
