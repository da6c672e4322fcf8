package bus

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// TestSurveyHandlers checks the answering side of the cluster's generic
// request: an operation is answered by its handler, an operation nobody
// registered and a handler that panics are answered with an error, the
// panic counted, and a name registered twice or not a subject token is
// refused.
func TestSurveyHandlers(t *testing.T) {
	s, err := New(&Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Shutdown(t.Context()) })
	echo := func(_ context.Context, req []byte) ([]byte, error) { return append([]byte("echo "), req...), nil }
	require.NoError(t, s.OnSurvey("echo", echo))
	require.NoError(t, s.OnSurvey("fail", func(context.Context, []byte) ([]byte, error) { return nil, errors.New("no such page") }))
	require.NoError(t, s.OnSurvey("panic", func(context.Context, []byte) ([]byte, error) { panic("boom") }))
	require.ErrorContains(t, s.OnSurvey("echo", echo), "registered already")
	require.ErrorContains(t, s.OnSurvey("a.*", echo), "letters")

	got, err := s.cl.Survey(t.Context(), "echo", []byte("x"))
	require.NoError(t, err)
	require.Equal(t, "echo x", string(got))
	_, err = s.cl.Survey(t.Context(), "fail", nil)
	require.ErrorContains(t, err, "no such page")
	_, err = s.cl.Survey(t.Context(), "nobody", nil)
	require.ErrorContains(t, err, `answers no survey "nobody"`)
	_, err = s.cl.Survey(t.Context(), "panic", nil)
	require.ErrorContains(t, err, "panic survey failed")
	require.Equal(t, 1.0, testutil.ToFloat64(s.metrics.panics.WithLabelValues(panicRequest)))

	// A single node has no other node to ask.
	_, err = s.Survey(t.Context(), "b", "echo", nil)
	require.ErrorIs(t, err, ErrNodeGone)
	require.Empty(t, s.LiveNodes())
	require.Empty(t, s.Status().Node)
}
