package migrations

import (
	"errors"
	"strings"
	"testing"
)

// A Citus too old for the layout is refused in one line naming the
// version to get; a current one with workers is laid out.
func TestCheckCitusVersion(t *testing.T) {
	st := &State{Schema: "public", Citus: CitusCluster{Installed: true, Coordinator: true, Workers: 2}}
	for _, tc := range []struct {
		version string
		ok      bool
	}{{"10.2-1", false}, {"9.5-2", false}, {"", false}, {"11.0-4", true}, {"13.2-1", true}} {
		st.Citus.Version = tc.version
		err := checkCitus(st, Options{})
		switch {
		case tc.ok && err != nil:
			t.Errorf("Citus %q: %v", tc.version, err)
		case !tc.ok && (!errors.Is(err, ErrCitus) || !strings.Contains(err.Error(), "upgrade to Citus 11")):
			t.Errorf("Citus %q: %v; want a refusal naming 11", tc.version, err)
		}
	}
}
