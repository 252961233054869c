package memtrack

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// quoted returns the words in double quotes in text, sorted, once each.
func quoted(text string) []string {
	var ws []string
	for _, m := range regexp.MustCompile(`"([a-z ]+)"`).FindAllStringSubmatch(text, -1) {
		ws = append(ws, m[1])
	}
	slices.Sort(ws)
	return slices.Compact(ws)
}

// mappingErrorOpDoc returns the values that the doc comment of
// MappingError.Op (errors.go) lists.
func mappingErrorOpDoc(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "errors.go", nil, parser.ParseComments)
	require.NoError(t, err)
	var doc string
	ast.Inspect(f, func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok || ts.Name.Name != "MappingError" {
			return true
		}
		for _, field := range ts.Type.(*ast.StructType).Fields.List {
			if len(field.Names) == 1 && field.Names[0].Name == "Op" {
				doc = field.Doc.Text() + field.Comment.Text()
			}
		}
		return false
	})
	require.NotEmpty(t, doc, "MappingError.Op has a doc comment")
	return quoted(doc)
}

// TestMappingErrorOps: the values of MappingError.Op are those its doc
// comment lists, and those the glossary's row of the refusals of elastic
// memory lists: each refusal is made, on the CPU, and its Op collected;
// each value listed is made by one refusal.
func TestMappingErrorOps(t *testing.T) {
	if _, err := os.Stat("errors.go"); err != nil {
		t.Skip("not run in the package's source directory")
	}
	d := freshCPU(t)
	g, err := d.MapGranularity()
	if errors.Is(err, ErrNotSupported) {
		t.Skip(err)
	}
	require.NoError(t, err)
	c, err := d.Category("elastic_ops")
	require.NoError(t, err)
	r, err := d.Reserve(4 * g)
	require.NoError(t, err)
	require.NoError(t, r.Map(0, g))
	refusals := []struct {
		name string
		call func() error
	}{
		{"Device.Reserve of a size off the granularity", func() error { _, err := d.Reserve(g + 1); return err }},
		{"Category.Reserve of a size off the granularity", func() error { _, err := c.Reserve(g + 1); return err }},
		{"Map off the granularity", func() error { return r.Map(1, g) }},
		{"Map past the end", func() error { return r.Map(4*g, g) }},
		{"Map over a mapping", func() error { return r.Map(0, g) }},
		{"Unmap of nothing mapped", func() error { return r.Unmap(g, g) }},
		{"Unmap off the granularity", func() error { return r.Unmap(1, g) }},
		{"Release with a mapping left", r.Release},
	}
	made := map[string][]string{}
	for _, rf := range refusals {
		var me *MappingError
		if assert.ErrorAs(t, rf.call(), &me, rf.name) {
			made[me.Op] = append(made[me.Op], rf.name)
			if me.Op == "reserve" {
				assert.Equal(t, "memtrack: not a multiple of the granularity: reserve of "+strconv.FormatInt(g+1, 10)+
					" bytes on cpu (granularity "+strconv.FormatInt(g, 10)+")", me.Error(), "no range of a reservation not made")
			}
		}
	}
	require.NoError(t, r.Unmap(0, g))
	require.NoError(t, r.Release())
	var me *MappingError
	require.ErrorAs(t, r.Release(), &me, "a second release")
	made[me.Op] = append(made[me.Op], "a second release")

	var ops []string
	for op := range made {
		ops = append(ops, op)
	}
	slices.Sort(ops)
	assert.Equal(t, ops, mappingErrorOpDoc(t), "MappingError.Op's doc lists the values the refusals make: %v", made)

	glossary, err := os.ReadFile("docs/glossary.md")
	require.NoError(t, err)
	var row string
	for _, line := range strings.Split(string(glossary), "\n") {
		if strings.Contains(line, "`MappingError.Op`") {
			row = line
		}
	}
	require.NotEmpty(t, row, "the glossary has a row for MappingError.Op")
	assert.Equal(t, ops, quoted(row), "the glossary lists the values of MappingError.Op")
}
