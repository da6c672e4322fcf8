package mcp

import (
	"errors"
	"fmt"

	"github.com/bub-bus/bub/peer"
	"github.com/bub-bus/bub/protocol"
)

// explain says what a failed call to the bus means for the assistant:
// a refusal names the grant the credential lacks, so that the model can
// tell the user rather than retry. Other errors already name the method
// and the topic.
func explain(err error, what string) error {
	switch {
	case protocol.CodeOf(err) == protocol.CodeForbidden:
		return fmt.Errorf("refused: %s is outside this server's grant (the bus said: %w); "+
			"bub mcp acts with its credential's grants only: ask the bus's operator to grant it, do not retry", what, err)
	case errors.Is(err, peer.ErrDisconnected):
		return fmt.Errorf("%w; bub mcp is reconnecting, try again shortly", err)
	}
	return err
}
