package bus_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/bus/console"
	"github.com/bub-bus/bub/bus/journal"
	"github.com/bub-bus/bub/bus/toolsub"
	"github.com/bub-bus/bub/bus/webhook"
)

// docMetric is one row of a doc's metrics table.
type docMetric struct {
	line       int
	name, kind string
	labels     string              // the labels column as written
	listed     map[string][]string // label: the values the row lists
}

// docMetricRow is a table row: | `name` | type | labels [| what] |.
var docMetricRow = regexp.MustCompile("^\\| `(bub_[a-z_]+)` \\| (counter|gauge|histogram) \\| ([^|]*(?:\\\\\\|[^|]*)*)\\|")

// docLabelList is "`label`: `v1`, `v2`, ...", the form in which a row
// lists every value of a label.
var docLabelList = regexp.MustCompile("`([a-z_]+)`: ((?:`[a-z_]+`(?:, )?)+)")

// parseMetricsTable reads the first table of path whose header begins
// "| metric | type |", up to its first line that is not a row.
func parseMetricsTable(t *testing.T, path string) []docMetric {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	lines := strings.Split(string(data), "\n")
	start := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "| metric | type |") })
	require.GreaterOrEqual(t, start, 0, "%s: no metrics table", path)
	var rows []docMetric
	for i := start + 2; i < len(lines) && strings.HasPrefix(lines[i], "|"); i++ {
		m := docMetricRow.FindStringSubmatch(lines[i])
		if m == nil {
			t.Errorf("%s:%d: not a metrics row: %s", path, i+1, lines[i])
			continue
		}
		row := docMetric{line: i + 1, name: m[1], kind: m[2], labels: m[3], listed: map[string][]string{}}
		for _, l := range docLabelList.FindAllStringSubmatch(m[3], -1) {
			for _, v := range strings.Split(l[2], ", ") {
				row.listed[l[1]] = append(row.listed[l[1]], strings.Trim(v, "`"))
			}
		}
		rows = append(rows, row)
	}
	return rows
}

// TestMetricsTables checks the metrics tables of docs/OPERATIONS.md and
// docs/PROTOCOL.md against what a bus exports: every metric of the bus
// is in each table, with its type and its labels, every value a row
// lists for a label is the bus's set of that label's values, and the
// table is not cut in two (a row after a paragraph is not a row). The
// bus has the add-ons whose metrics the tables list, as bub serve has.
func TestMetricsTables(t *testing.T) {
	// The add-ons' metrics are the bus's too, as bub serve wires them.
	o := &bus.Options{Extensions: []bus.Extension{journal.New(nil), webhook.New(webhook.Options{}), console.Extension{}}}
	withToolSubs(o, toolsub.Options{})
	srv := bustest.Start(t, o)
	// A request answered and a connection the bus closed (taken over by
	// a second one of its client), so that the vectors with no fixed
	// values have a series to show their labels.
	first := bustest.Connect(t, srv.URL, "a", nil)
	bustest.Connect(t, srv.URL, "a", nil)
	first.Closed()
	families, err := srv.Registry().Gather()
	require.NoError(t, err)
	exported := map[string]*dto.MetricFamily{}
	for _, f := range families {
		if strings.HasPrefix(f.GetName(), "bub_") {
			exported[f.GetName()] = f
		}
	}
	for _, doc := range []string{"../docs/OPERATIONS.md", "../docs/PROTOCOL.md"} {
		t.Run(strings.TrimPrefix(doc, "../docs/"), func(t *testing.T) {
			rows := parseMetricsTable(t, doc)
			documented := map[string]bool{}
			for _, row := range rows {
				documented[row.name] = true
				f, ok := exported[row.name]
				if !ok {
					// A cluster node's own metrics; the cluster tests
					// scrape them.
					if !strings.HasPrefix(row.name, "bub_cluster_") {
						t.Errorf("%s:%d: %s is not exported by the bus", doc, row.line, row.name)
					}
					continue
				}
				if kind := strings.ToLower(f.GetType().String()); kind != row.kind {
					t.Errorf("%s:%d: %s is a %s, the doc says %s", doc, row.line, row.name, kind, row.kind)
				}
				values := map[string][]string{}
				for _, m := range f.GetMetric() {
					for _, lp := range m.GetLabel() {
						if !slices.Contains(values[lp.GetName()], lp.GetValue()) {
							values[lp.GetName()] = append(values[lp.GetName()], lp.GetValue())
						}
					}
				}
				for label := range values {
					if !strings.Contains(row.labels, "`"+label+"`") {
						t.Errorf("%s:%d: %s has the label %s, which the doc does not name", doc, row.line, row.name, label)
					}
				}
				for label, listed := range row.listed {
					got := slices.Sorted(slices.Values(values[label]))
					if want := slices.Sorted(slices.Values(listed)); !slices.Equal(got, want) {
						t.Errorf("%s:%d: %s{%s}: the doc lists %v, the bus exports %v", doc, row.line, row.name, label, want, got)
					}
				}
			}
			for name := range exported {
				if !documented[name] {
					t.Errorf("%s: the metrics table lacks %s, which the bus exports", doc, name)
				}
			}
		})
	}
}
