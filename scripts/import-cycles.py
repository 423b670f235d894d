#!/usr/bin/env python3
# Import cycles of the library (crates/undertaker/src), from its `crate::` and `super::`
# paths (comments stripped, test modules skipped; `crate::os` read as `linux`).
# Prints each pair of sibling modules that import each other, then each strongly
# connected component of modules. Usage: scripts/import-cycles.py [SRC_DIR]
import os,re,sys
root=sys.argv[1] if len(sys.argv)>1 else "crates/undertaker/src"
mods={}
for d,_,fs in os.walk(root):
    for f in fs:
        if not f.endswith('.rs'): continue
        p=os.path.join(d,f); rel=os.path.relpath(p,root)[:-3].split(os.sep)
        if rel[-1] in('mod','lib'): rel=rel[:-1]
        if rel and rel[-1]=='tests': continue
        mods[tuple(rel)]=p
def resolve(parts):
    if parts[:1]==['os']: parts=['linux']+parts[1:]
    for n in range(len(parts),0,-1):
        if tuple(parts[:n]) in mods: return tuple(parts[:n])
    return None
edges=set()
for m,p in mods.items():
    src=open(p).read()
    src=re.sub(r'#\[cfg\([^\]]*\btest\b[^\]]*\)\]\s*mod tests\s*\{.*','',src,flags=re.S)
    src=re.sub(r'//[^\n]*','',src)
    ismod=p.endswith('mod.rs') or p.endswith('lib.rs')
    for mt in re.finditer(r'\b(crate|super)((?:::\w+)+)',src):
        path=[x for x in mt.group(2).split('::') if x]
        if mt.group(1)=='super': path=list(m[:-1])+path
        r=resolve(path)
        if r: edges.add((m,r))
# sibling-level: for each edge a->b, take the first differing ancestor pair
sib={}
for a,b in edges:
    k=0
    while k<min(len(a),len(b)) and a[k]==b[k]: k+=1
    if k==len(a) or k==len(b): continue  # ancestor relation
    A,B=a[:k+1],b[:k+1]
    sib.setdefault(A,set()).add(B)
seen=set();out=[]
for A in sib:
    for B in sib[A]:
        if A in sib.get(B,()) and (B,A) not in seen:
            seen.add((A,B)); out.append(('::'.join(A),'::'.join(B)))
for o in out: print(o)
print("sibling cycles:",len(out))
