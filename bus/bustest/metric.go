package bustest

import "testing"

// Metric returns the value of srv's metric name with the given label
// value ("" for none), or -1 when it is not there.
func Metric(t testing.TB, srv *Server, name, label string) float64 {
	t.Helper()
	families, err := srv.Registry().Gather()
	if err != nil {
		t.Fatalf("bustest: gather metrics: %v", err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if label != "" && (len(m.GetLabel()) == 0 || m.GetLabel()[0].GetValue() != label) {
				continue
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return -1
}
