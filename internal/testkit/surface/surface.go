// Package surface checks that a public package exports only what its
// users use: every exported identifier is named by an example or by a
// program outside the package. A public package's surface test lists its
// exports with Exports, parses its users with Files and reports Unused.
package surface

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// ThroughInterface are the methods that callers reach through a standard
// interface (error, fmt.Stringer, encoding.Text(Un)marshaler) rather than
// by name: they are not listed as exports.
var ThroughInterface = []string{"Error", "Unwrap", "String", "MarshalText", "UnmarshalText"}

// Exports lists the exported identifiers of the package in dir, from its
// non-test files: X for a package-level name, T.M for a method, field or
// interface method of an exported type T. interfaces holds the exported
// interface types.
func Exports(t testing.TB, dir string) (ids []string, interfaces map[string]bool) {
	t.Helper()
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, dir, func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) != 1 {
		t.Fatalf("%s holds %d packages, want 1", dir, len(pkgs))
	}
	interfaces = map[string]bool{}
	for _, pkg := range pkgs {
		for _, f := range pkg.Files {
			for _, d := range f.Decls {
				ids = append(ids, declExports(d, interfaces)...)
			}
		}
	}
	slices.Sort(ids)
	return ids, interfaces
}

func declExports(d ast.Decl, interfaces map[string]bool) []string {
	var ids []string
	switch d := d.(type) {
	case *ast.FuncDecl:
		if !d.Name.IsExported() {
			return nil
		}
		if d.Recv == nil {
			return []string{d.Name.Name}
		}
		recv := receiverType(d.Recv.List[0].Type)
		if ast.IsExported(recv) && !slices.Contains(ThroughInterface, d.Name.Name) {
			return []string{recv + "." + d.Name.Name}
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
	return ids
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

// Files parses the Go files under root for which keep (given the path)
// is true, skipping testdata directories.
func Files(t testing.TB, root string, keep func(path string) bool) []*ast.File {
	t.Helper()
	fset := token.NewFileSet()
	var files []*ast.File
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "testdata" {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || !keep(path) {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files = append(files, f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// Unused returns the identifiers of exported (Exports' terms) that files
// do not use. Package-level names count when named through an import of
// importPath; members (T.M) when any file uses M as a selector, a key of
// a composite literal or a method it declares, and a file that uses an
// interface type uses all its methods. The check type-checks nothing, so
// a common member name may pass on another type's use; a name no file
// mentions at all fails.
func Unused(files []*ast.File, importPath string, exported []string, interfaces map[string]bool) []string {
	used := map[string]bool{}
	members := map[string]bool{}
	for _, f := range files {
		local := ""
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == importPath {
				local = importPath[strings.LastIndex(importPath, "/")+1:]
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
			used[typ] = true // a type whose values a user holds is used, named or not
		}
	}
	for _, id := range exported {
		if typ, _, ok := strings.Cut(id, "."); ok && interfaces[typ] && used[typ] {
			used[id] = true
		}
	}
	var unused []string
	for _, id := range exported {
		if !used[id] {
			unused = append(unused, id)
		}
	}
	return unused
}
