-- CreateTable
CREATE TABLE "McpServer" (
    "name" TEXT NOT NULL PRIMARY KEY,
    "spec" TEXT NOT NULL,
    "source" TEXT NOT NULL DEFAULT 'api',
    "state" TEXT NOT NULL DEFAULT 'unknown',
    "toolCount" INTEGER NOT NULL DEFAULT 0,
    "lastError" TEXT,
    "checkedAt" DATETIME,
    "createdAt" DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP
);

-- CreateTable
CREATE TABLE "McpCall" (
    "key" TEXT NOT NULL PRIMARY KEY,
    "server" TEXT NOT NULL,
    "tool" TEXT NOT NULL,
    "status" TEXT NOT NULL,
    "ok" BOOLEAN,
    "result" TEXT,
    "detail" TEXT,
    "startedAt" DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "finishedAt" DATETIME
);
