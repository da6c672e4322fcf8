package bcp

import "fmt"

// Taint is how far an agent's output may be adversarial.
type Taint uint8

// The taint levels. The zero value is not a level; it reads as TaintHigh
// wherever a level is needed, because unknown provenance is the worst case.
const (
	TaintLow Taint = iota + 1
	TaintMedium
	TaintHigh
)

// ParseTaint reads "low", "medium" or "high".
func ParseTaint(s string) (Taint, error) {
	switch s {
	case "low":
		return TaintLow, nil
	case "medium":
		return TaintMedium, nil
	case "high":
		return TaintHigh, nil
	}
	return 0, newError(CodeInvalidValue, "", fmt.Sprintf("taint must be low, medium or high, not %q", truncate(s, maxNameLen)))
}

// String returns the level's name, or "unknown".
func (t Taint) String() string {
	switch t {
	case TaintLow:
		return "low"
	case TaintMedium:
		return "medium"
	case TaintHigh:
		return "high"
	}
	return "unknown"
}

// StepDown is the taint of a validated BCP response from a Reader with taint
// t: high becomes medium, medium becomes low, low stays low. The step is
// earned by the structural constraints and deterministic validation, not by
// any judgment of the content, so it is one level and never more.
func (t Taint) StepDown() Taint {
	switch t {
	case TaintLow, TaintMedium:
		return TaintLow
	}
	return TaintMedium
}

// MarshalText writes the level's name.
func (t Taint) MarshalText() ([]byte, error) {
	if t < TaintLow || t > TaintHigh {
		return nil, fmt.Errorf("bcp: invalid taint %d", uint8(t))
	}
	return []byte(t.String()), nil
}

// UnmarshalText reads a level's name.
func (t *Taint) UnmarshalText(text []byte) error {
	v, err := ParseTaint(string(text))
	if err != nil {
		return err
	}
	*t = v
	return nil
}
