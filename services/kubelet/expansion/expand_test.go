package expansion

import "testing"

func TestExpand(t *testing.T) {
	vars := map[string]string{
		"VAR_A":     "A",
		"VAR_B":     "B",
		"VAR_EMPTY": "",
		"VAR_REF":   "$(VAR_A)",
	}
	mapping := MappingFuncFor(vars, map[string]string{"VAR_A": "shadowed", "SERVICE": "svc"})
	tests := []struct {
		name, input, want string
	}{
		{"no operator", "plain text", "plain text"},
		{"defined reference", "$(VAR_A)", "A"},
		{"references inside text", "___$(VAR_A)___$(VAR_B)___", "___A___B___"},
		{"adjacent references", "$(VAR_A)$(VAR_B)", "AB"},
		{"empty value", "x$(VAR_EMPTY)y", "xy"},
		{"undefined reference kept", "$(UNKNOWN)", "$(UNKNOWN)"},
		{"first context wins", "$(VAR_A)", "A"},
		{"later context consulted", "$(SERVICE)", "svc"},
		{"escaped operator", "$$(VAR_A)", "$(VAR_A)"},
		{"double escape then reference", "$$$(VAR_A)", "$A"},
		{"lone operator at end", "cost$", "cost$"},
		{"operator before other text", "$VAR_A", "$VAR_A"},
		{"incomplete reference kept and scanning goes on", "$(VAR_A $(VAR_B)", "$(VAR_A $(VAR_B)"},
		{"incomplete reference at end", "x$(", "x$("},
		{"empty name", "$()", "$()"},
		{"no recursive expansion", "$(VAR_REF)", "$(VAR_A)"},
		{"escaped operator alone", "$$", "$"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Expand(tt.input, mapping); got != tt.want {
				t.Errorf("Expand(%q) = %q, want %q", tt.input, got, tt.want)
			}
		})
	}
}
