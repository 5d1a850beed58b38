package durashuffle_test

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/durashuffle/durashuffle"
)

// The root package is what a user needs, and all of it: every exported
// identifier (function, type, constant, variable, method, field,
// interface method) is used by an example, the command line or the
// sidecar, the programs that use the library as an outside one would.
//
// Package-level names must be named as durashuffle.X. Methods, fields and
// interface methods are matched by name (a selector .M, a key M: in a
// literal of the type, or a method M declared by an implementation): the
// test type-checks nothing, so a common name may pass on another type's
// use, but a name that no user file mentions at all fails. Config's
// groups hold the keys, used through their names (the command line binds
// them by reflection); methods that only fmt, errors and encoding call
// through their interfaces are exempt.
func TestSurfaceEveryExportedIdentifierIsUsed(t *testing.T) {
	exported, interfaces := rootExports(t)
	used := usesOf(userFiles(t), exported)
	// A user file that names an interface (an implementation's
	// assertion, a parameter) uses every method of it.
	for _, id := range exported {
		if typ, _, ok := strings.Cut(id, "."); ok && interfaces[typ] && used[typ] {
			used[id] = true
		}
	}
	// Config's groups hold the keys of the file, the environment and
	// the flags, which the command line reaches by reflection.
	ct := reflect.TypeFor[durashuffle.Config]()
	for i := range ct.NumField() {
		g := ct.Field(i)
		used["Config."+g.Name] = true
		for j := range g.Type.NumField() {
			used[g.Type.Name()+"."+g.Type.Field(j).Name] = true
		}
	}
	var unused []string
	for _, id := range exported {
		if !used[id] {
			unused = append(unused, id)
		}
	}
	if len(unused) > 0 {
		t.Errorf("%d exported identifiers of the root package are used by no example (example*_test.go), "+
			"no file of cmd/durashuffle and none of sidecar; use them there or unexport them:\n\t%s",
			len(unused), strings.Join(unused, "\n\t"))
	}
}

// throughInterface are the methods that callers reach through a standard
// interface (error, fmt.Stringer, encoding.Text(Un)marshaler)
// rather than by name.
var throughInterface = []string{"Error", "Unwrap", "String", "MarshalText", "UnmarshalText"}

// rootExports lists the root package's exported identifiers: X for a
// package-level name, T.M for a method, field or interface method of an
// exported type T. interfaces holds the exported interface types.
func rootExports(t *testing.T) (ids []string, interfaces map[string]bool) {
	t.Helper()
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	pkg := pkgs["durashuffle"]
	if pkg == nil {
		t.Fatalf("no package durashuffle in the root directory, found %d others", len(pkgs))
	}
	interfaces = map[string]bool{}
	for _, f := range pkg.Files {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				if d.Recv == nil {
					ids = append(ids, d.Name.Name)
					continue
				}
				recv := receiverType(d.Recv.List[0].Type)
				if ast.IsExported(recv) && !slices.Contains(throughInterface, d.Name.Name) {
					ids = append(ids, recv+"."+d.Name.Name)
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								ids = append(ids, n.Name)
							}
						}
					case *ast.TypeSpec:
						if !s.Name.IsExported() {
							continue
						}
						ids = append(ids, s.Name.Name)
						var members *ast.FieldList
						switch ty := s.Type.(type) {
						case *ast.StructType:
							members = ty.Fields
						case *ast.InterfaceType:
							members = ty.Methods
							interfaces[s.Name.Name] = true
						}
						if members == nil {
							continue
						}
						for _, m := range members.List {
							for _, n := range m.Names {
								if n.IsExported() {
									ids = append(ids, s.Name.Name+"."+n.Name)
								}
							}
						}
					}
				}
			}
		}
	}
	slices.Sort(ids)
	return ids, interfaces
}

func receiverType(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return receiverType(e.X)
	case *ast.IndexExpr:
		return receiverType(e.X)
	case *ast.Ident:
		return e.Name
	}
	return ""
}

// userFiles parses the examples, every Go file of cmd/durashuffle and
// the sidecar's code.
func userFiles(t *testing.T) []*ast.File {
	t.Helper()
	fset := token.NewFileSet()
	var files []*ast.File
	parse := func(path string) {
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	examples, err := filepath.Glob("example*_test.go")
	if err != nil || len(examples) == 0 {
		t.Fatalf("no example files in the root directory (%v)", err)
	}
	for _, p := range examples {
		parse(p)
	}
	// The command line's tests run it as a user would; the sidecar's
	// tests are tests of the sidecar, not a use of the library.
	for _, dir := range []struct {
		path  string
		tests bool
	}{{"cmd/durashuffle", true}, {"sidecar", false}} {
		n := len(files)
		err := filepath.WalkDir(dir.path, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && d.Name() == "testdata" {
				return filepath.SkipDir
			}
			if !d.IsDir() && strings.HasSuffix(path, ".go") && (dir.tests || !strings.HasSuffix(path, "_test.go")) {
				parse(path)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(files) == n {
			t.Fatalf("no Go files under %s", dir.path)
		}
	}
	return files
}

// usesOf returns what files use of the root package, in rootExports'
// terms. A member T.M is marked for every exported type T: usesOf does
// not know the type a selector's operand has.
func usesOf(files []*ast.File, exported []string) map[string]bool {
	used := map[string]bool{}
	members := map[string]bool{} // names used as selectors, literal keys or method declarations
	for _, f := range files {
		local := ""
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == "github.com/durashuffle/durashuffle" {
				local = "durashuffle"
				if imp.Name != nil {
					local = imp.Name.Name
				}
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
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

// go doc of the root package fits on one screen and starts with what the
// package is for: a user reads what they need there, and all of it.
func TestSurfaceGoDocFitsOneScreen(t *testing.T) {
	out, err := exec.Command("go", "doc", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go doc .: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	const maxLines = 48
	if len(lines) > maxLines {
		t.Errorf("go doc . prints %d lines, want at most %d:\n%s", len(lines), maxLines, out)
	}
	if len(lines) < 3 || !strings.HasPrefix(lines[2], "Package durashuffle is durable shuffle storage") {
		t.Errorf("go doc . does not start with the package's summary:\n%s", out)
	}
	for _, internal := range []string{"internal/", "chunker.", "frame.", "memstore."} {
		if bytes.Contains(out, []byte(internal)) {
			t.Errorf("go doc . names %q, which a user cannot import:\n%s", internal, out)
		}
	}
}
