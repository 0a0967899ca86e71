package demo

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/pooltop-dev/pooltop/internal/pgtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(pgtest.Runner{M: m}) }
