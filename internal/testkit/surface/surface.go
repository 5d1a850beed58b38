// Package surface checks that a public package of durashuffle exports
// only what its users need. A public package's surface test calls Check
// from its own directory.
package surface

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// module is the library's module path; the command line is its own
// module under it.
const module = "github.com/durashuffle/durashuffle"

// throughInterface are the methods that callers reach through a standard
// interface (error, fmt.Stringer, encoding.Text(Un)marshaler,
// json.(Un)marshaler) rather than by name.
var throughInterface = []string{"Error", "Unwrap", "String", "MarshalText", "UnmarshalText", "MarshalJSON", "UnmarshalJSON"}

// Check fails t naming every exported identifier of the package in the
// working directory that no user file mentions. An identifier is X for a
// package-level name and T.M for a method, field or interface method of
// an exported type T.
//
// The user files are the programs that use the package as an outside
// one would, and the library's other packages, which need what they
// use: the examples (example*_test.go) of every package, every Go file
// of the command line (cmd/durashuffle) and of examples/, and the
// non-test files of every other package of the library except the test
// kit (internal/testkit), which is not a user.
//
// Struct fields that encoding/json reaches (tagged json:) are used: they
// are a stored format's. Package-level names must be named as pkg.X (or bare, in an example
// that is of the package itself). Members are matched by name (a
// selector .M, a key M: in a composite literal, or a method M declared
// by an implementation): nothing is type-checked, so a common name may
// pass on another type's use, but a name that no user file mentions at
// all fails. A user file that names an interface uses all its methods.
// reached lists identifiers users reach without naming them (by
// reflection, say); the caller says why in its test.
func Check(t testing.TB, reached ...string) {
	t.Helper()
	unused, err := Unused(".", reached...)
	if err != nil {
		t.Fatal(err)
	}
	if len(unused) > 0 {
		t.Errorf("%d exported identifiers are used by no example of the package (example*_test.go), "+
			"no file of cmd/durashuffle or examples/ and no other package of the library; "+
			"use them there or unexport them:\n\t%s", len(unused), strings.Join(unused, "\n\t"))
	}
}

// Unused returns the exported identifiers of the package in dir that no
// user file mentions, in Check's terms, sorted.
func Unused(dir string, reached ...string) ([]string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	root, err := moduleRoot(dir)
	if err != nil {
		return nil, err
	}
	rel, err := filepath.Rel(root, dir)
	if err != nil {
		return nil, err
	}
	importPath := module
	if rel != "." {
		importPath += "/" + filepath.ToSlash(rel)
	}
	name, d, err := exports(dir)
	if err != nil {
		return nil, err
	}
	files, examples, err := userFiles(root, dir)
	if err != nil {
		return nil, err
	}
	used := usesOf(files, examples, importPath, name, d.ids)
	for _, id := range slices.Concat(reached, d.encoded) {
		used[id] = true
	}
	// A user holds a value of every type that a used identifier's
	// declaration names (New(st Store) makes Store used), and one who
	// names an interface (an implementation's assertion, a parameter)
	// uses every method of it.
	for changed := true; changed; {
		changed = false
		mark := func(id string) {
			if !used[id] {
				used[id], changed = true, true
			}
		}
		for _, id := range d.ids {
			if !used[id] {
				continue
			}
			for _, m := range d.mentions[id] {
				mark(m)
			}
			if typ, _, ok := strings.Cut(id, "."); ok {
				mark(typ)
			}
		}
		for _, id := range d.ids {
			if typ, _, ok := strings.Cut(id, "."); ok && d.interfaces[typ] && used[typ] {
				mark(id)
			}
		}
	}
	var unused []string
	for _, id := range d.ids {
		if !used[id] {
			unused = append(unused, id)
		}
	}
	return unused, nil
}

// moduleRoot is the directory of the library's go.mod at or above dir.
func moduleRoot(dir string) (string, error) {
	for d := dir; ; {
		b, err := os.ReadFile(filepath.Join(d, "go.mod"))
		if err == nil && strings.HasPrefix(string(b), "module "+module+"\n") {
			return d, nil
		}
		up := filepath.Dir(d)
		if up == d {
			return "", fmt.Errorf("no go.mod of module %s at or above %s", module, dir)
		}
		d = up
	}
}

// decls is what a package exports: its identifiers, sorted, the
// interface types among them, and for each identifier the package's
// exported types its declaration names (a function's parameters and
// results, a field's or a variable's type).
type decls struct {
	ids        []string
	interfaces map[string]bool
	mentions   map[string][]string
	encoded    []string // fields encoding/json reaches
}

// exports lists the exported identifiers of the package in dir (test
// files aside).
func exports(dir string) (name string, d decls, err error) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, dir, func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		return "", d, err
	}
	if len(pkgs) != 1 {
		return "", d, fmt.Errorf("%s holds %d packages, want one", dir, len(pkgs))
	}
	d = decls{interfaces: map[string]bool{}, mentions: map[string][]string{}}
	for n, pkg := range pkgs {
		name = n
		for _, f := range pkg.Files {
			for _, decl := range f.Decls {
				d.add(decl)
			}
		}
	}
	slices.Sort(d.ids)
	return name, d, nil
}

// add records the exported identifiers decl declares.
func (d *decls) add(decl ast.Decl) {
	switch decl := decl.(type) {
	case *ast.FuncDecl:
		if !decl.Name.IsExported() {
			return
		}
		id := decl.Name.Name
		if decl.Recv != nil {
			recv := receiverType(decl.Recv.List[0].Type)
			if !ast.IsExported(recv) || slices.Contains(throughInterface, decl.Name.Name) {
				return
			}
			id = recv + "." + id
		}
		d.record(id, decl.Type)
	case *ast.GenDecl:
		for _, s := range decl.Specs {
			switch s := s.(type) {
			case *ast.ValueSpec:
				for _, n := range s.Names {
					if n.IsExported() {
						d.record(n.Name, s.Type)
					}
				}
			case *ast.TypeSpec:
				if s.Name.IsExported() {
					d.addType(s)
				}
			}
		}
	}
}

func (d *decls) addType(s *ast.TypeSpec) {
	d.record(s.Name.Name, nil)
	var members *ast.FieldList
	switch ty := s.Type.(type) {
	case *ast.StructType:
		members = ty.Fields
	case *ast.InterfaceType:
		members = ty.Methods
		d.interfaces[s.Name.Name] = true
	}
	if members == nil {
		return
	}
	for _, m := range members.List {
		for _, n := range m.Names {
			if n.IsExported() && !slices.Contains(throughInterface, n.Name) {
				id := s.Name.Name + "." + n.Name
				d.record(id, m.Type)
				if encoded(m.Tag) {
					d.encoded = append(d.encoded, id)
				}
			}
		}
	}
}

// encoded reports whether a field's tag names it for encoding/json,
// which reaches it by reflection: a stored format's field is needed by
// whoever reads the format.
func encoded(tag *ast.BasicLit) bool {
	if tag == nil {
		return false
	}
	t, err := strconv.Unquote(tag.Value)
	if err != nil {
		return false
	}
	name, ok := reflect.StructTag(t).Lookup("json")
	return ok && name != "-"
}

// record adds id, and the exported identifiers that node names bare
// (the package's own types) as its mentions.
func (d *decls) record(id string, node ast.Node) {
	d.ids = append(d.ids, id)
	if node == nil {
		return
	}
	ast.Inspect(node, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.SelectorExpr:
			return false // another package's name
		case *ast.Ident:
			if n.IsExported() {
				d.mentions[id] = append(d.mentions[id], n.Name)
			}
		}
		return true
	})
}

func receiverType(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return receiverType(e.X)
	case *ast.IndexExpr:
		return receiverType(e.X)
	case *ast.IndexListExpr:
		return receiverType(e.X)
	case *ast.Ident:
		return e.Name
	}
	return ""
}

// userFiles parses the package's examples, the command line, examples/,
// the other packages' examples and their non-test files. The first
// examples files are the package's own examples.
func userFiles(root, dir string) (files []*ast.File, examples int, err error) {
	fset := token.NewFileSet()
	parse := func(path string) error {
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files = append(files, f)
		return nil
	}
	paths, err := filepath.Glob(filepath.Join(dir, "example*_test.go"))
	if err != nil {
		return nil, 0, err
	}
	for _, p := range paths {
		if err := parse(p); err != nil {
			return nil, 0, err
		}
	}
	examples = len(files)
	programs := []string{filepath.Join(root, "cmd", "durashuffle"), filepath.Join(root, "examples")}
	for _, p := range programs {
		if _, err := os.Stat(p); err != nil {
			return nil, 0, fmt.Errorf("user programs: %w", err)
		}
	}
	testkit := filepath.Join(root, "internal", "testkit")
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); n == "testdata" || n == ".git" || path == testkit {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		program := slices.ContainsFunc(programs, func(p string) bool { return strings.HasPrefix(path, p+string(filepath.Separator)) })
		switch {
		case program:
			return parse(path)
		case filepath.Dir(path) == dir:
			return nil // its examples are parsed above
		case strings.HasSuffix(path, "_test.go"):
			// Another package's examples use this one as a program
			// would (the root's start an embedded server).
			if strings.HasPrefix(filepath.Base(path), "example") {
				return parse(path)
			}
			return nil
		}
		return parse(path)
	})
	if err != nil {
		return nil, 0, err
	}
	if len(files) == examples {
		return nil, 0, errors.New("no user files beside the package's examples")
	}
	return files, examples, nil
}

// usesOf returns what files use of the package importPath (named name),
// in exports' terms; the first examples files are the package's own
// examples, which may be of the package itself. A member T.M is marked for every exported type T:
// usesOf does not know the type a selector's operand has.
func usesOf(files []*ast.File, examples int, importPath, name string, exported []string) map[string]bool {
	used := map[string]bool{}
	members := map[string]bool{} // names used as selectors, literal keys or method declarations
	for i, f := range files {
		local, inside := "", i < examples && f.Name.Name == name
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == importPath {
				local = name
				if imp.Name != nil {
					local = imp.Name.Name
				}
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.Ident:
				if inside {
					used[n.Name] = true
				}
			case *ast.SelectorExpr:
				if x, ok := n.X.(*ast.Ident); ok && local != "" && x.Name == local {
					used[n.Sel.Name] = true
				}
				members[n.Sel.Name] = true
			case *ast.CompositeLit:
				for _, e := range n.Elts {
					if kv, ok := e.(*ast.KeyValueExpr); ok {
						if k, ok := kv.Key.(*ast.Ident); ok {
							members[k.Name] = true
						}
					}
				}
			case *ast.FuncDecl:
				if n.Recv != nil {
					members[n.Name.Name] = true
				}
			}
			return true
		})
	}
	for _, id := range exported {
		if typ, m, ok := strings.Cut(id, "."); ok && members[m] {
			used[id] = true
			// A type whose values a user holds is used, named or not
			// (Keys returns []Key; callers read k.Name).
			used[typ] = true
		}
	}
	return used
}
