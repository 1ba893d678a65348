// Package gitconfig parses git's configuration file syntax and sanitizes a repository's
// config before it is copied into a snapshot.
//
// The parser follows git's own reader (config.c: get_next_char, get_base_var,
// get_extended_base_var, get_value, parse_value; format described in git-config(1),
// "CONFIGURATION FILE"): sections "[name]", "[name \"subsection\"]" and the deprecated
// "[name.subsection]"; case-insensitive section and variable names; values with double
// quotes, the escapes \n \t \b \" \\, backslash-newline continuation lines, and comments
// starting with '#' or ';' outside quotes; a variable without '=' is a boolean true.
// Input git would reject is rejected with ErrSyntax.
//
// Sanitize removes or neutralises what must not reach a snapshot S that an untrusted agent
// reads: credentials in URLs, credential helpers, extra HTTP headers, includes, and
// command hooks (see Sanitize). Its output is canonical: comments and layout are dropped,
// and sanitizing the output again returns it unchanged.
//
// Privilege: none; pure parsing, linked into brood.
package gitconfig

import (
	"bytes"
	"fmt"
	"strings"
)

// Config is a parsed git config file: its sections in file order. Section and variable
// names are stored lower-cased; subsections keep their case.
type Config struct {
	Sections []Section
}

// Section is one "[name]" or "[name \"sub\"]" header and the variables that follow it up
// to the next header. Variables before the first header (git reads them as keys without
// a section) form a first Section with an empty Name. A name from the deprecated "[name.sub]" form keeps its dot (Name
// "name.sub", HasSub false).
type Section struct {
	Name   string // lower-case; letters, digits, '-' and '.'
	Sub    string // raw bytes of the quoted subsection (any byte except newline)
	HasSub bool
	Vars   []Var
}

// Var is one variable. NoValue marks the "name" form without '=' (git reads it as true),
// which differs from "name =" (the empty string).
type Var struct {
	Name    string // lower-case; a letter, then letters, digits and '-'
	Value   string
	NoValue bool
}

// reader mirrors git's get_next_char: CRLF reads as LF, and end of input reads as LF with
// eof set.
type reader struct {
	b    []byte
	i    int
	line int
	eof  bool
}

func (r *reader) next() byte {
	if r.i >= len(r.b) {
		r.eof = true
		return '\n'
	}
	c := r.b[r.i]
	r.i++
	if c == '\r' && r.i < len(r.b) && r.b[r.i] == '\n' {
		r.i++
		c = '\n'
	}
	if c == '\n' {
		r.line++
	}
	return c
}

func (r *reader) errorf(format string, a ...any) error {
	return fmt.Errorf("line %d: %s: %w", r.line+1, fmt.Sprintf(format, a...), ErrSyntax)
}

// isSpace is git's isspace (GIT_SPACE: space, \t, \n, \r).
func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func isAlpha(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

func isKeyChar(c byte) bool { return isAlpha(c) || c >= '0' && c <= '9' || c == '-' }

func lower(c byte) byte {
	if c >= 'A' && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// Parse reads a git config file. Errors wrap ErrSyntax and name the line; they never
// quote the input (it may hold credentials).
func Parse(b []byte) (*Config, error) {
	b = bytes.TrimPrefix(b, []byte("\xef\xbb\xbf")) // UTF-8 BOM, skipped by git too
	r := &reader{b: b}
	cfg := &Config{}
	comment := false
	for {
		c := r.next()
		if r.eof {
			return cfg, nil
		}
		switch {
		case c == '\n':
			comment = false
			continue
		case comment || isSpace(c):
			continue
		case c == '#' || c == ';':
			comment = true
			continue
		case c == '[':
			s, err := parseHeader(r)
			if err != nil {
				return nil, err
			}
			cfg.Sections = append(cfg.Sections, s)
			continue
		case !isAlpha(c):
			return nil, r.errorf("unexpected character %#x", c)
		}
		if len(cfg.Sections) == 0 {
			// git reads variables before the first header as keys without a section.
			cfg.Sections = append(cfg.Sections, Section{})
		}
		v, err := parseVar(r, c)
		if err != nil {
			return nil, err
		}
		s := &cfg.Sections[len(cfg.Sections)-1]
		s.Vars = append(s.Vars, v)
	}
}

// parseHeader reads a section header after '['.
func parseHeader(r *reader) (Section, error) {
	var name strings.Builder
	for {
		c := r.next()
		if r.eof {
			return Section{}, r.errorf("unterminated section header")
		}
		if c == ']' {
			if name.Len() == 0 {
				return Section{}, r.errorf("empty section name")
			}
			return Section{Name: name.String()}, nil
		}
		if isSpace(c) {
			if name.Len() == 0 {
				return Section{}, r.errorf("empty section name")
			}
			sub, err := parseSubsection(r, c)
			if err != nil {
				return Section{}, err
			}
			return Section{Name: name.String(), Sub: sub, HasSub: true}, nil
		}
		if !isKeyChar(c) && c != '.' {
			return Section{}, r.errorf("bad character %#x in section name", c)
		}
		name.WriteByte(lower(c))
	}
}

// parseSubsection reads ` "sub"]` after the first blank of a header.
func parseSubsection(r *reader, c byte) (string, error) {
	for {
		if c == '\n' {
			return "", r.errorf("unterminated section header")
		}
		if !isSpace(c) {
			break
		}
		c = r.next()
	}
	if c != '"' {
		return "", r.errorf("subsection must be quoted")
	}
	var sub strings.Builder
	for {
		c := r.next()
		if c == '\n' {
			return "", r.errorf("unterminated subsection")
		}
		if c == '"' {
			break
		}
		if c == '\\' {
			c = r.next()
			if c == '\n' {
				return "", r.errorf("unterminated subsection")
			}
		}
		sub.WriteByte(c)
	}
	if r.next() != ']' {
		return "", r.errorf("expected ']' after subsection")
	}
	return sub.String(), nil
}

// parseVar reads a variable whose first letter c has been read.
func parseVar(r *reader, c byte) (Var, error) {
	var name strings.Builder
	name.WriteByte(lower(c))
	for {
		c = r.next()
		if r.eof || !isKeyChar(c) {
			break
		}
		name.WriteByte(lower(c))
	}
	for c == ' ' || c == '\t' {
		c = r.next()
	}
	if c == '\n' {
		return Var{Name: name.String(), NoValue: true}, nil
	}
	if c != '=' {
		return Var{}, r.errorf("expected '=' after variable name")
	}
	val, err := parseValue(r)
	if err != nil {
		return Var{}, err
	}
	return Var{Name: name.String(), Value: val}, nil
}

// parseValue follows git's parse_value: unquoted leading and trailing blanks are dropped,
// inner blanks kept; quotes toggle; comments end the value outside quotes.
func parseValue(r *reader) (string, error) {
	var v []byte
	quote, comment := false, false
	trim := 0 // length to cut back to if only blanks follow (0: none pending)
	for {
		c := r.next()
		if c == '\n' {
			if quote {
				return "", r.errorf("unterminated quoted value")
			}
			if trim > 0 {
				v = v[:trim]
			}
			return string(v), nil
		}
		if comment {
			continue
		}
		if isSpace(c) && !quote {
			if trim == 0 {
				trim = len(v)
			}
			if len(v) > 0 {
				v = append(v, c)
			}
			continue
		}
		if !quote && (c == ';' || c == '#') {
			comment = true
			continue
		}
		trim = 0
		if c == '\\' {
			c = r.next()
			switch c {
			case '\n': // continuation line (at end of input git ends the value)
				continue
			case 't':
				c = '\t'
			case 'b':
				c = '\b'
			case 'n':
				c = '\n'
			case '\\', '"':
			default:
				return "", r.errorf("bad escape")
			}
			v = append(v, c)
			continue
		}
		if c == '"' {
			quote = !quote
			continue
		}
		v = append(v, c)
	}
}

// Bytes returns c in canonical form: one header per section, one tab-indented
// "name = value" line per variable, values quoted and escaped only where needed.
// Parse(c.Bytes()) returns a Config equal to c for any Config Parse produced.
func (c *Config) Bytes() []byte {
	var b bytes.Buffer
	for i, s := range c.Sections {
		if i == 0 && s.Name == "" && !s.HasSub {
			writeVars(&b, s.Vars) // variables before any header
			continue
		}
		b.WriteByte('[')
		b.WriteString(s.Name)
		if s.HasSub {
			b.WriteString(` "`)
			for i := 0; i < len(s.Sub); i++ {
				if s.Sub[i] == '"' || s.Sub[i] == '\\' {
					b.WriteByte('\\')
				}
				b.WriteByte(s.Sub[i])
			}
			b.WriteByte('"')
		}
		b.WriteString("]\n")
		writeVars(&b, s.Vars)
	}
	return b.Bytes()
}

func writeVars(b *bytes.Buffer, vars []Var) {
	for _, v := range vars {
		b.WriteByte('\t')
		b.WriteString(v.Name)
		if !v.NoValue {
			b.WriteString(" = ")
			writeValue(b, v.Value)
		}
		b.WriteByte('\n')
	}
}

func writeValue(b *bytes.Buffer, v string) {
	quote := v == "" || isSpace(v[0]) || isSpace(v[len(v)-1]) || strings.ContainsAny(v, "#;\r")
	if quote {
		b.WriteByte('"')
	}
	for i := 0; i < len(v); i++ {
		switch c := v[i]; c {
		case '\\', '"':
			b.WriteByte('\\')
			b.WriteByte(c)
		case '\n':
			b.WriteString(`\n`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		default:
			b.WriteByte(c)
		}
	}
	if quote {
		b.WriteByte('"')
	}
}
