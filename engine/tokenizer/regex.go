package tokenizer

import (
	"fmt"
	"regexp"
	"strings"
)

// HF compiles tokenizer.json patterns with Oniguruma, whose \s, \d and \w
// are Unicode-aware; Go's RE2 syntax keeps them ASCII. compileOnig rewrites
// those escapes to their Unicode classes before compiling, so a pattern such
// as `\s+` also matches U+3000 or U+2028 as it does in HF. Constructs RE2
// lacks (look-around, backreferences) fail with ErrUnsupported.

// The Unicode classes of Oniguruma's escapes, as RE2 class bodies.
const (
	onigSpace = `\t\n\v\f\r \x{85}\p{Z}`
	onigDigit = `\p{Nd}`
	onigWord  = `\p{L}\p{M}\p{Nd}\p{Pc}`
)

func compileOnig(pattern string) (*regexp.Regexp, error) {
	var b strings.Builder
	inClass := false
	for i := 0; i < len(pattern); i++ {
		c := pattern[i]
		switch {
		case c == '\\' && i+1 < len(pattern):
			i++
			e := pattern[i]
			body := ""
			switch e {
			case 's', 'S':
				body = onigSpace
			case 'd', 'D':
				body = onigDigit
			case 'w', 'W':
				body = onigWord
			default:
				b.WriteByte('\\')
				b.WriteByte(e)
				continue
			}
			negated := e == 'S' || e == 'D' || e == 'W'
			switch {
			case !inClass && negated:
				b.WriteString("[^" + body + "]")
			case !inClass:
				b.WriteString("[" + body + "]")
			case negated:
				return nil, fmt.Errorf("%w: regex %q: \\%c inside a character class", ErrUnsupported, pattern, e)
			default:
				b.WriteString(body)
			}
		case c == '[' && !inClass:
			inClass = true
			b.WriteByte(c)
			// A ']' right after '[' or '[^' is a literal member.
			if i+1 < len(pattern) && pattern[i+1] == '^' {
				b.WriteByte('^')
				i++
			}
			if i+1 < len(pattern) && pattern[i+1] == ']' {
				b.WriteString(`\]`)
				i++
			}
		case c == ']' && inClass:
			inClass = false
			b.WriteByte(c)
		default:
			b.WriteByte(c)
		}
	}
	re, err := regexp.Compile(b.String())
	if err != nil {
		return nil, fmt.Errorf("%w: regex %q: %w", ErrUnsupported, pattern, err)
	}
	return re, nil
}
