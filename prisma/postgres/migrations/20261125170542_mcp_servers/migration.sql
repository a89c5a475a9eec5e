-- CreateTable
CREATE TABLE "McpServer" (
    "name" TEXT NOT NULL,
    "spec" TEXT NOT NULL,
    "source" TEXT NOT NULL DEFAULT 'api',
    "state" TEXT NOT NULL DEFAULT 'unknown',
    "toolCount" INTEGER NOT NULL DEFAULT 0,
    "lastError" TEXT,
    "checkedAt" TIMESTAMP(3),
    "createdAt" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "McpServer_pkey" PRIMARY KEY ("name")
);

-- CreateTable
CREATE TABLE "McpCall" (
    "key" TEXT NOT NULL,
    "server" TEXT NOT NULL,
    "tool" TEXT NOT NULL,
    "status" TEXT NOT NULL,
    "ok" BOOLEAN,
    "result" TEXT,
    "detail" TEXT,
    "startedAt" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "finishedAt" TIMESTAMP(3),

    CONSTRAINT "McpCall_pkey" PRIMARY KEY ("key")
);
