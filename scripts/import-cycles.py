#!/usr/bin/env python3
# Import cycles of the library (crates/undertaker/src), from its `crate::` and `super::`
# paths (comments stripped, test modules skipped; `crate::os` read as `linux`).
# Prints each pair of sibling modules that import each other ("sibling cycles"),
# then each strongly connected component of modules ("module cycles", file by file). Usage: scripts/import-cycles.py [SRC_DIR]
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

# Module by module (file level): strongly connected components of more than one.
alias={('linux',):('linux',),('windows',):('windows',),('os',):('linux',)}
def fresolve(parts):
    for n in range(len(parts),0,-1):
        t=tuple(parts[:n])
        if t[:1]==('os',): t=('linux',)+t[1:]
        if t in mods: return t
    return None
fedges={m:set() for m in mods}
for m,p in mods.items():
    src=open(p).read()
    src=re.sub(r'#\[cfg\([^\]]*\btest\b[^\]]*\)\]\s*mod tests\s*\{.*','',src,flags=re.S)
    src=re.sub(r'//[^\n]*','',src)
    for mt in re.finditer(r'\b(crate|super)::((?:\w+::)*\w+|(?:\w+::)*\{)',src):
        kind,path=mt.group(1),mt.group(2).rstrip(':{').split('::')
        path=[x for x in path if x]
        if kind=='super':
            base=list(m[:-1]) if not mods[m].endswith('mod.rs') else list(m[:-1])
            # super from foo.rs (non-mod) -> parent; from foo/mod.rs -> parent too
            path=base+path
        r=fresolve(path)
        if r and r!=m and not (m[:len(r)]==r): fedges[m].add(r)
        # import of a child module of m is fine; a parent-module import counts only if parent file
# Tarjan
idx={};low={};st=[];on=set();res=[];i=[0]
sys.setrecursionlimit(10000)
def sc(v):
    idx[v]=low[v]=i[0];i[0]+=1;st.append(v);on.add(v)
    for w in fedges[v]:
        if w not in idx: sc(w);low[v]=min(low[v],low[w])
        elif w in on: low[v]=min(low[v],idx[w])
    if low[v]==idx[v]:
        c=[]
        while True:
            w=st.pop();on.discard(w);c.append(w)
            if w==v:break
        if len(c)>1: res.append(c)
for v in mods:
    if v not in idx: sc(v)
for c in res: print(len(c), sorted('::'.join(x) for x in c))
print("module cycles:",len(res))
