package scaling

import (
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
)

func testLog(t *testing.T) logr.Logger { return testr.New(t) }
