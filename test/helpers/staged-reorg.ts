/**
 * The python reorganisation the staged tests run on a mount (issue 18): a directory made, a
 * file and a directory moved into it, a file removed, one edited and one created.
 */
export const REORG = `
import os, shutil
os.makedirs('archive/2025', exist_ok=True)
shutil.move('cases/smith/report.txt', 'archive/2025/smith-report.txt')
os.rename('cases/jones', 'archive/2025/jones')
os.remove('cases/tmp.log')
with open('cases/index.md', 'a') as f: f.write('- reorganised\\n')
with open('archive/README', 'w') as f: f.write('moved here\\n')
`;
