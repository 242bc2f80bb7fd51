// Package tftests holds the offline checks of PicoMQ's Terraform modules
// (terraform/modules, terraform/examples) and the tests of the deployment
// files in deploy/. It is its own Go module so that the HCL parser stays
// out of the product's go.mod; `make test` runs it.
//
// The provider registry is unreachable where these tests run, so `tofu
// validate`/`plan` cannot load the AWS provider's schema. What can be
// checked without it is checked here, on the parsed HCL: every var.X is
// declared and every declared variable used, every reference to a
// resource, data source, local or module exists, every templatefile()
// call passes exactly the variables its template uses, module calls pass
// only declared variables and every required one, and every provider is
// pinned (source and version). tofu fmt and tflint run on top (tools_test.go).
package tftests

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
)

// Variable is a declared input variable.
type Variable struct {
	Name        string
	Default     cty.Value // cty.NilVal when there is none
	HasDefault  bool
	Description string
	Type        bool
}

// ModuleCall is a module block.
type ModuleCall struct {
	Name   string
	Source string
	Args   map[string]hcl.Expression
	Range  hcl.Range
}

// Module is one directory of .tf files, parsed.
type Module struct {
	Dir               string
	Variables         map[string]*Variable
	Outputs           map[string]hcl.Expression
	Resources         map[string]bool // "type.name"
	Data              map[string]bool // "type.name"
	Locals            map[string]bool
	Calls             map[string]*ModuleCall
	RequiredProviders map[string]map[string]string // name -> source, version
	RequiredVersion   string
	ProviderTypes     map[string]hcl.Range // provider prefixes of resources and data sources
	exprs             []located
	dynamic           map[string]bool // iterator names of dynamic blocks
}

type located struct {
	expr   hcl.Expression
	output string // the output it belongs to, if any
}

// Load parses every .tf file of dir.
func Load(dir string) (*Module, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.tf"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%s: no .tf files", dir)
	}
	m := &Module{
		Dir: dir, Variables: map[string]*Variable{}, Outputs: map[string]hcl.Expression{},
		Resources: map[string]bool{}, Data: map[string]bool{}, Locals: map[string]bool{},
		Calls: map[string]*ModuleCall{}, RequiredProviders: map[string]map[string]string{},
		ProviderTypes: map[string]hcl.Range{}, dynamic: map[string]bool{},
	}
	p := hclparse.NewParser()
	for _, f := range files {
		hf, diags := p.ParseHCLFile(f)
		if diags.HasErrors() {
			return nil, fmt.Errorf("parse: %s", diags.Error())
		}
		body := hf.Body.(*hclsyntax.Body)
		for _, b := range body.Blocks {
			if err := m.block(b); err != nil {
				return nil, err
			}
		}
		if len(body.Attributes) > 0 {
			return nil, fmt.Errorf("%s: top-level attributes are not allowed", f)
		}
	}
	return m, nil
}

func label(b *hclsyntax.Block, n int) (string, error) {
	if len(b.Labels) != n {
		return "", fmt.Errorf("%s: %s block needs %d labels", b.DefRange(), b.Type, n)
	}
	return strings.Join(b.Labels, "."), nil
}

func (m *Module) block(b *hclsyntax.Block) error {
	switch b.Type {
	case "variable":
		name, err := label(b, 1)
		if err != nil {
			return err
		}
		v := &Variable{Name: name}
		if a, ok := b.Body.Attributes["default"]; ok {
			val, diags := a.Expr.Value(nil)
			if diags.HasErrors() {
				return fmt.Errorf("variable %s default: %s", name, diags.Error())
			}
			v.Default, v.HasDefault = val, true
		}
		if a, ok := b.Body.Attributes["description"]; ok {
			if val, diags := a.Expr.Value(nil); !diags.HasErrors() && val.Type() == cty.String {
				v.Description = val.AsString()
			}
		}
		_, v.Type = b.Body.Attributes["type"]
		m.Variables[name] = v
		// The type is a type expression, not references; validations are.
		m.collect(b.Body, "", "type")
	case "output":
		name, err := label(b, 1)
		if err != nil {
			return err
		}
		if a, ok := b.Body.Attributes["value"]; ok {
			m.Outputs[name] = a.Expr
		}
		m.collect(b.Body, name)
	case "resource", "data":
		name, err := label(b, 2)
		if err != nil {
			return err
		}
		if b.Type == "resource" {
			m.Resources[name] = true
		} else {
			m.Data[name] = true
		}
		m.ProviderTypes[strings.SplitN(b.Labels[0], "_", 2)[0]] = b.DefRange()
		m.collect(b.Body, "")
	case "locals":
		for n := range b.Body.Attributes {
			m.Locals[n] = true
		}
		m.collect(b.Body, "")
	case "module":
		name, err := label(b, 1)
		if err != nil {
			return err
		}
		c := &ModuleCall{Name: name, Args: map[string]hcl.Expression{}, Range: b.DefRange()}
		for n, a := range b.Body.Attributes {
			if n == "source" {
				val, diags := a.Expr.Value(nil)
				if diags.HasErrors() {
					return fmt.Errorf("module %s source: %s", name, diags.Error())
				}
				c.Source = val.AsString()
				continue
			}
			c.Args[n] = a.Expr
		}
		m.Calls[name] = c
		m.collect(b.Body, "")
	case "terraform":
		if a, ok := b.Body.Attributes["required_version"]; ok {
			if val, diags := a.Expr.Value(nil); !diags.HasErrors() {
				m.RequiredVersion = val.AsString()
			}
		}
		for _, rb := range b.Body.Blocks {
			if rb.Type != "required_providers" {
				continue
			}
			for n, a := range rb.Body.Attributes {
				val, diags := a.Expr.Value(nil)
				if diags.HasErrors() || !val.Type().IsObjectType() {
					return fmt.Errorf("required_providers.%s: want { source, version }", n)
				}
				req := map[string]string{}
				for k, v := range val.AsValueMap() {
					if v.Type() == cty.String {
						req[k] = v.AsString()
					}
				}
				m.RequiredProviders[n] = req
			}
		}
	case "provider":
		if _, err := label(b, 1); err != nil {
			return err
		}
		m.ProviderTypes[b.Labels[0]] = b.DefRange()
		m.collect(b.Body, "")
	default:
		m.collect(b.Body, "")
	}
	return nil
}

// collect records every expression of body and its nested blocks.
func (m *Module) collect(body *hclsyntax.Body, output string, skip ...string) {
	for _, a := range body.Attributes {
		if slices.Contains(skip, a.Name) {
			continue
		}
		m.exprs = append(m.exprs, located{a.Expr, output})
	}
	for _, b := range body.Blocks {
		if b.Type == "dynamic" && len(b.Labels) == 1 {
			m.dynamic[b.Labels[0]] = true
			if a, ok := b.Body.Attributes["iterator"]; ok {
				if t, diags := hcl.AbsTraversalForExpr(a.Expr); !diags.HasErrors() {
					m.dynamic[t.RootName()] = true
				}
			}
		}
		if b.Type == "lifecycle" {
			// ignore_changes names attributes, it references nothing.
			m.collect(b.Body, output, "ignore_changes")
			continue
		}
		m.collect(b.Body, output)
	}
}

// ignoredRoots are reference roots that name no declaration.
var ignoredRoots = map[string]bool{"path": true, "count": true, "each": true, "self": true, "terraform": true}

func attrName(t hcl.Traversal, i int) string {
	if len(t) <= i {
		return ""
	}
	if a, ok := t[i].(hcl.TraverseAttr); ok {
		return a.Name
	}
	return ""
}

// Check returns every problem found in m, as "file:line: message".
func (m *Module) Check() []string {
	var probs []string
	add := func(r hcl.Range, format string, args ...any) {
		probs = append(probs, fmt.Sprintf("%s:%d: %s", filepath.Base(r.Filename), r.Start.Line, fmt.Sprintf(format, args...)))
	}
	used := map[string]bool{}
	for _, e := range m.exprs {
		for _, t := range e.expr.Variables() {
			root, next := t.RootName(), attrName(t, 1)
			where := ""
			if e.output != "" {
				where = fmt.Sprintf(" (in output %q)", e.output)
			}
			switch {
			case ignoredRoots[root] || m.dynamic[root]:
			case root == "var":
				used[next] = true
				if m.Variables[next] == nil {
					add(t.SourceRange(), "var.%s is not declared%s", next, where)
				}
			case root == "local":
				if !m.Locals[next] {
					add(t.SourceRange(), "local.%s is not declared%s", next, where)
				}
			case root == "module":
				if m.Calls[next] == nil {
					add(t.SourceRange(), "module.%s is not declared%s", next, where)
				}
			case root == "data":
				if !m.Data[next+"."+attrName(t, 2)] {
					add(t.SourceRange(), "data.%s.%s is not declared%s", next, attrName(t, 2), where)
				}
			default:
				if !m.Resources[root+"."+next] {
					add(t.SourceRange(), "resource %s.%s is not declared%s", root, next, where)
				}
			}
		}
		probs = append(probs, m.checkCalls(e.expr)...)
	}
	for _, name := range sortedKeys(m.Variables) {
		v := m.Variables[name]
		if !used[name] {
			probs = append(probs, fmt.Sprintf("variable %q is declared but never used", name))
		}
		if v.Description == "" {
			probs = append(probs, fmt.Sprintf("variable %q has no description", name))
		}
		if !v.Type {
			probs = append(probs, fmt.Sprintf("variable %q has no type", name))
		}
	}
	if m.RequiredVersion == "" {
		probs = append(probs, "terraform.required_version is not set")
	}
	for _, p := range sortedKeys(m.ProviderTypes) {
		req, ok := m.RequiredProviders[p]
		switch {
		case !ok:
			add(m.ProviderTypes[p], "provider %q is used but not in required_providers", p)
		case req["source"] == "":
			add(m.ProviderTypes[p], "provider %q has no source in required_providers", p)
		case req["version"] == "":
			add(m.ProviderTypes[p], "provider %q is not pinned (no version constraint)", p)
		}
	}
	for _, name := range sortedKeys(m.Calls) {
		probs = append(probs, m.checkModuleCall(m.Calls[name])...)
	}
	return probs
}

// checkCalls checks the templatefile() and file() calls inside expr.
func (m *Module) checkCalls(expr hcl.Expression) []string {
	var probs []string
	hclsyntax.VisitAll(expr.(hclsyntax.Node), func(n hclsyntax.Node) hcl.Diagnostics {
		call, ok := n.(*hclsyntax.FunctionCallExpr)
		if !ok || (call.Name != "templatefile" && call.Name != "file") || len(call.Args) == 0 {
			return nil
		}
		at := fmt.Sprintf("%s:%d", filepath.Base(call.Range().Filename), call.Range().Start.Line)
		path, err := m.evalPath(call.Args[0])
		if err != nil {
			probs = append(probs, fmt.Sprintf("%s: %s path: %v", at, call.Name, err))
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			probs = append(probs, fmt.Sprintf("%s: %s: %v", at, call.Name, err))
			return nil
		}
		if call.Name == "file" {
			return nil
		}
		if len(call.Args) != 2 {
			probs = append(probs, fmt.Sprintf("%s: templatefile needs two arguments", at))
			return nil
		}
		obj, ok := call.Args[1].(*hclsyntax.ObjectConsExpr)
		if !ok {
			probs = append(probs, fmt.Sprintf("%s: templatefile variables must be an object literal", at))
			return nil
		}
		passed := map[string]bool{}
		for _, item := range obj.Items {
			k, diags := item.KeyExpr.Value(nil)
			if diags.HasErrors() || k.Type() != cty.String {
				probs = append(probs, fmt.Sprintf("%s: templatefile variable names must be literals", at))
				continue
			}
			passed[k.AsString()] = true
		}
		want, err := TemplateVariables(path, src)
		if err != nil {
			probs = append(probs, fmt.Sprintf("%s: %v", at, err))
			return nil
		}
		for _, v := range want {
			if !passed[v] {
				probs = append(probs, fmt.Sprintf("%s: template %s uses %q, which the call does not pass", at, filepath.Base(path), v))
			}
		}
		for _, k := range sortedKeys(passed) {
			if !slices.Contains(want, k) {
				probs = append(probs, fmt.Sprintf("%s: templatefile passes %q, which template %s never uses", at, k, filepath.Base(path)))
			}
		}
		return nil
	})
	return probs
}

// evalPath evaluates a file path argument that may use path.module.
func (m *Module) evalPath(e hclsyntax.Expression) (string, error) {
	abs, err := filepath.Abs(m.Dir)
	if err != nil {
		return "", err
	}
	ctx := &hcl.EvalContext{Variables: map[string]cty.Value{
		"path": cty.ObjectVal(map[string]cty.Value{"module": cty.StringVal(abs), "root": cty.StringVal(abs)}),
	}}
	v, diags := e.Value(ctx)
	if diags.HasErrors() {
		return "", fmt.Errorf("%s", diags.Error())
	}
	return v.AsString(), nil
}

// TemplateVariables lists the variables a templatefile() template uses,
// sorted (for-loop iterators excluded).
func TemplateVariables(name string, src []byte) ([]string, error) {
	expr, diags := hclsyntax.ParseTemplate(src, name, hcl.InitialPos)
	if diags.HasErrors() {
		return nil, fmt.Errorf("parse template: %s", diags.Error())
	}
	set := map[string]bool{}
	for _, t := range expr.Variables() {
		set[t.RootName()] = true
	}
	return sortedKeys(set), nil
}

// checkModuleCall checks a call of a local module: every argument is a
// declared variable of it, every variable without a default is passed.
func (m *Module) checkModuleCall(c *ModuleCall) []string {
	at := fmt.Sprintf("%s:%d", filepath.Base(c.Range.Filename), c.Range.Start.Line)
	if !strings.HasPrefix(c.Source, "./") && !strings.HasPrefix(c.Source, "../") {
		return nil // a registry or git module: not checked offline
	}
	callee, err := Load(filepath.Join(m.Dir, c.Source))
	if err != nil {
		return []string{fmt.Sprintf("%s: module %s: %v", at, c.Name, err)}
	}
	var probs []string
	meta := map[string]bool{"count": true, "for_each": true, "depends_on": true, "providers": true, "version": true}
	for _, arg := range sortedKeys(c.Args) {
		if !meta[arg] && callee.Variables[arg] == nil {
			probs = append(probs, fmt.Sprintf("%s: module %s: argument %q is not a variable of %s", at, c.Name, arg, c.Source))
		}
	}
	for _, name := range sortedKeys(callee.Variables) {
		if !callee.Variables[name].HasDefault && c.Args[name] == nil {
			probs = append(probs, fmt.Sprintf("%s: module %s: required variable %q is not passed", at, c.Name, name))
		}
	}
	return probs
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
