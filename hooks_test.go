package memtrack

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSlots: each slot of a device's state has one owner, and the hooks
// and reporters run in the order their marks and parts need: the
// allocation sites before the history and the leak watch, which read the
// site's mark, and every reporter before the out-of-memory observers,
// which receive the whole report.
func TestSlots(t *testing.T) {
	slots := map[string]int{
		"sites": sitesSlot, "history": historySlot, "leaks": leaksSlot, "categories": categoriesSlot,
		"observers": observersSlot, "captures": capturesSlot,
		"reporters": reportersSlot, "spaces": spacesSlot,
	}
	owner := map[int]string{}
	for name, i := range slots {
		require.True(t, i >= 0 && i < numSlots, "%s's slot %d is outside the state's %d", name, i, numSlots)
		if other, ok := owner[i]; ok {
			t.Errorf("slot %d is both %s's and %s's", i, name, other)
		}
		owner[i] = name
	}
	assert.Len(t, owner, numSlots, "every slot has an owner")
	assert.Less(t, sitesSlot, historySlot)
	assert.Less(t, sitesSlot, leaksSlot)
	for _, r := range []int{sitesSlot, categoriesSlot} {
		assert.Less(t, r, observersSlot)
	}
}
