// Package expansion expands $(VAR) references in a container's command, args,
// env values and subPathExpr, with Kubernetes' rules: $(NAME) becomes NAME's
// value when NAME is defined and stays as written otherwise, $$ escapes a $,
// and any other $ (a lone one, "$(" without a closing parenthesis) is kept.
// Mirrors k8s.io/kubernetes third_party/forked/golang/expansion.
package expansion

import "strings"

const (
	operator        = '$'
	referenceOpener = '('
	referenceCloser = ')'
)

// MappingFuncFor returns a mapping that looks a name up in each context in
// turn and, when no context defines it, returns the reference as written
// ("$(NAME)"), so that an undefined variable is left untouched.
func MappingFuncFor(context ...map[string]string) func(string) string {
	return func(name string) string {
		for _, vars := range context {
			if v, ok := vars[name]; ok {
				return v
			}
		}
		return string(operator) + string(referenceOpener) + name + string(referenceCloser)
	}
}

// Expand replaces every $(NAME) in input with mapping(NAME) and every $$ with
// $; other text, including a $ that begins no reference, is copied as is.
// Expansion is a single pass: a value that itself contains $(X) is not
// expanded again.
func Expand(input string, mapping func(string) string) string {
	if !strings.ContainsRune(input, operator) {
		return input
	}
	var b strings.Builder
	checkpoint := 0
	for cursor := 0; cursor < len(input); cursor++ {
		if input[cursor] != operator || cursor+1 >= len(input) {
			continue
		}
		b.WriteString(input[checkpoint:cursor])
		read, isVar, advance := tryReadVariableName(input[cursor+1:])
		if isVar {
			b.WriteString(mapping(read))
		} else {
			b.WriteString(read)
		}
		cursor += advance
		checkpoint = cursor + 1
	}
	return b.String() + input[checkpoint:]
}

// tryReadVariableName reads what follows a $: the name of a complete
// reference (isVar), or the text to copy instead, and how many bytes it used.
func tryReadVariableName(input string) (read string, isVar bool, advance int) {
	switch input[0] {
	case operator:
		return input[0:1], false, 1
	case referenceOpener:
		for i := 1; i < len(input); i++ {
			if input[i] == referenceCloser {
				return input[1:i], true, i + 1
			}
		}
		// An incomplete reference: keep "$(" and go on scanning after it.
		return string(operator) + string(referenceOpener), false, 1
	default:
		return string(operator) + input[0:1], false, 1
	}
}
