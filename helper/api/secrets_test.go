package api

import (
	"errors"
	"strings"
	"testing"
)

func goodBinding() SecretBinding {
	return SecretBinding{Name: "$OPENAI_API_KEY", Placeholder: "sk-proj-" + strings.Repeat("p", 40), Value: "sk-proj-" + strings.Repeat("r", 40), Hosts: []string{"api.openai.com"}}
}

func TestSecretsValidate(t *testing.T) {
	refresh := SecretBinding{Name: "refresh", Placeholder: strings.Repeat("q", 30), Value: "1//real", Hosts: []string{"oauth2.googleapis.com"},
		Login: "gemini", Role: RoleRefresh, TokenURLs: []string{"https://oauth2.googleapis.com/token"}}
	if err := (SessionSecrets{Bindings: []SecretBinding{goodBinding(), refresh}}).Validate(); err != nil {
		t.Fatalf("valid secrets: %v", err)
	}
	bad := map[string]func(b *SecretBinding){
		"short placeholder":    func(b *SecretBinding) { b.Placeholder = "sk-short" },
		"placeholder chars":    func(b *SecretBinding) { b.Placeholder = strings.Repeat("a", 30) + "/" },
		"value with space":     func(b *SecretBinding) { b.Value = "a b" },
		"value with newline":   func(b *SecretBinding) { b.Value = "a\nb" },
		"value too long":       func(b *SecretBinding) { b.Value = strings.Repeat("v", MaxSecretValue+1) },
		"placeholder == value": func(b *SecretBinding) { b.Value = b.Placeholder },
		"wildcard host":        func(b *SecretBinding) { b.Hosts = []string{"*.openai.com"} },
		"host with port":       func(b *SecretBinding) { b.Hosts = []string{"api.openai.com:443"} },
		"upper-case host":      func(b *SecretBinding) { b.Hosts = []string{"API.openai.com"} },
		"too many hosts": func(b *SecretBinding) {
			b.Hosts = strings.Split(strings.Repeat("a.b ", MaxSecretHosts+1), " ")[:MaxSecretHosts+1]
		},
		"unknown role":        func(b *SecretBinding) { b.Role, b.Login = "owner", "x" },
		"login without role":  func(b *SecretBinding) { b.Login = "x" },
		"token url on a key":  func(b *SecretBinding) { b.TokenURLs = []string{"https://api.openai.com/t"} },
		"refresh without url": func(b *SecretBinding) { b.Role, b.Login = RoleRefresh, "x" },
		"refresh url elsewhere": func(b *SecretBinding) {
			b.Role, b.Login, b.TokenURLs = RoleRefresh, "x", []string{"https://evil.example/t"}
		},
		"refresh url http": func(b *SecretBinding) {
			b.Role, b.Login, b.TokenURLs = RoleRefresh, "x", []string{"http://api.openai.com/t"}
		},
		"empty name": func(b *SecretBinding) { b.Name = "" },
	}
	for name, mutate := range bad {
		b := goodBinding()
		mutate(&b)
		err := (SessionSecrets{Bindings: []SecretBinding{b}}).Validate()
		if !errors.Is(err, ErrBadSecrets) {
			t.Errorf("%s: %v, want ErrBadSecrets", name, err)
		} else if strings.Contains(err.Error(), b.Value) || strings.Contains(err.Error(), b.Placeholder) {
			t.Errorf("%s: the error names a value: %v", name, err)
		}
	}
	a, b := goodBinding(), goodBinding()
	b.Name, b.Placeholder = "second", a.Placeholder+"x"
	if err := (SessionSecrets{Bindings: []SecretBinding{a, b}}).Validate(); !errors.Is(err, ErrBadSecrets) {
		t.Errorf("a placeholder inside another: %v", err)
	}
	many := make([]SecretBinding, MaxSecretBindings+1)
	if err := (SessionSecrets{Bindings: many}).Validate(); !errors.Is(err, ErrBadSecrets) {
		t.Errorf("too many bindings: %v", err)
	}
	big := make([]SecretBinding, 8)
	for i := range big {
		big[i] = goodBinding()
		big[i].Placeholder = strings.Repeat(string(rune('a'+i)), MaxSecretValue)
		big[i].Value = strings.Repeat("v", MaxSecretValue)
	}
	if err := (SessionSecrets{Bindings: big}).Validate(); !errors.Is(err, ErrBadSecrets) {
		t.Errorf("over MaxSecretsBytes: %v", err)
	}
}
