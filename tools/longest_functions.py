#!/usr/bin/env python3
"""The non-test functions in crates/ longer than N lines (default 120), longest first, as
`lines path:line name` (issue 26: no function over 120 lines). Run from the repository root.
Comments, strings and char literals are blanked before braces are counted (a brace in a
string does not end a function); a file is read up to its `#[cfg(test)]`; tests/
directories and tests.rs files are skipped."""
import re, os, sys
limit = int(sys.argv[1]) if len(sys.argv) > 1 else 120
FN = re.compile(r'^\s*(pub(\([^)]*\))?\s+)?((async|const|unsafe|extern\s+"C")\s+)*fn\s+(\w+)')
def clean(src):
    out=[]; i=0; n=len(src)
    while i<n:
        c=src[i]
        if src.startswith('//',i):
            j=src.find('\n',i); j=n if j<0 else j; i=j; continue
        if src.startswith('/*',i):
            j=src.find('*/',i+2); j=n if j<0 else j+2
            out.append('\n'*src[i:j].count('\n')); i=j; continue
        m=re.match(r'r(#*)"',src[i:i+10]) if c=='r' and (i==0 or not (src[i-1].isalnum() or src[i-1]=='_')) else None
        if m:
            end='"'+m.group(1); j=src.find(end,i+len(m.group(0))); j=n if j<0 else j+len(end)
            out.append('""'+'\n'*src[i:j].count('\n')); i=j; continue
        if c=='"':
            j=i+1
            while j<n and src[j]!='"':
                j+= 2 if src[j]=='\\' else 1
            out.append('""'+'\n'*src[i:j+1].count('\n')); i=j+1; continue
        if c=="'":
            m=re.match(r"'(\\.[^']*|[^\\'])'",src[i:i+12])
            if m: out.append("' '"); i+=len(m.group(0)); continue
        out.append(c); i+=1
    return ''.join(out)
res=[]
for root,_,files in os.walk('crates'):
    if '/tests' in root or root.endswith('tests'): continue
    for f in files:
        if not f.endswith('.rs') or f=='tests.rs': continue
        p=os.path.join(root,f)
        lines=clean(open(p).read()).split('\n')
        for i,l in enumerate(lines):
            if re.match(r'\s*#\[cfg\(test\)\]',l): break
            m=FN.match(l)
            if not m: continue
            depth=0; started=False; j=i
            while j<len(lines):
                for ch in lines[j]:
                    if ch=='{': depth+=1; started=True
                    elif ch=='}': depth-=1
                    elif ch==';' and not started: break
                if started and depth==0: break
                if not started and ';' in lines[j]: break
                j+=1
            if started: res.append((j-i+1,p,i+1,m.group(5)))
res.sort(reverse=True)
for n,p,line,name in res:
    if n>limit: print(n,f'{p}:{line}',name)
