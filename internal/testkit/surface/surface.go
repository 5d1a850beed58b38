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
	"slices"
	"strconv"
	"strings"
	"testing"
)

// module is the library's module path; the command line is its own
// module under it.
const module = "github.com/durashuffle/durashuffle"

// throughInterface are the methods that callers reach through a standard
// interface (error, fmt.Stringer, encoding.Text(Un)marshaler) rather
// than by name.
var throughInterface = []string{"Error", "Unwrap", "String", "MarshalText", "UnmarshalText"}

// Check fails t naming every exported identifier of the package in the
// working directory that no user file mentions. An identifier is X for a
// package-level name and T.M for a method, field or interface method of
// an exported type T.
//
// The user files are the programs that use the package as an outside
// one would, and the library's other packages, which need what they
// use: the package's own examples (example*_test.go), every Go file of
// the command line (cmd/durashuffle) and of examples/, and the non-test
// files of every other package of the library except the test kit
// (internal/testkit), which is not a user.
//
// Package-level names must be named as pkg.X (or bare, in an example
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
	name, exported, interfaces, err := exports(dir)
	if err != nil {
		return nil, err
	}
	files, examples, err := userFiles(root, dir)
	if err != nil {
		return nil, err
	}
	used := usesOf(files, examples, importPath, name, exported)
	for _, id := range reached {
		used[id] = true
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

// exports lists the exported identifiers of the package in dir (test
// files aside) and the exported interface types among them.
func exports(dir string) (name string, ids []string, interfaces map[string]bool, err error) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, dir, func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		return "", nil, nil, err
	}
	if len(pkgs) != 1 {
		return "", nil, nil, fmt.Errorf("%s holds %d packages, want one", dir, len(pkgs))
	}
	interfaces = map[string]bool{}
	for n, pkg := range pkgs {
		name = n
		for _, f := range pkg.Files {
			for _, d := range f.Decls {
				ids = appendDecl(ids, d, interfaces)
			}
		}
	}
	slices.Sort(ids)
	return name, ids, interfaces, nil
}

func appendDecl(ids []string, d ast.Decl, interfaces map[string]bool) []string {
	switch d := d.(type) {
	case *ast.FuncDecl:
		if !d.Name.IsExported() {
			return ids
		}
		if d.Recv == nil {
			return append(ids, d.Name.Name)
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
						if n.IsExported() && !slices.Contains(throughInterface, n.Name) {
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
	case *ast.IndexListExpr:
		return receiverType(e.X)
	case *ast.Ident:
		return e.Name
	}
	return ""
}

// userFiles parses the package's examples, the command line, examples/
// and the non-test files of the library's other packages. The first
// examples files are the package's examples.
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
		case filepath.Dir(path) == dir || strings.HasSuffix(path, "_test.go"):
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
