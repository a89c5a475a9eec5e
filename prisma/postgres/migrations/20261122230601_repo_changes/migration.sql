-- CreateTable
CREATE TABLE "Repo" (
    "name" TEXT NOT NULL,
    "cloneUrl" TEXT NOT NULL,
    "defaultBranch" TEXT NOT NULL,
    "checks" TEXT NOT NULL,
    "policy" TEXT NOT NULL,
    "agent" TEXT NOT NULL,
    "github" TEXT,
    "createdBy" TEXT,
    "createdAt" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updatedAt" TIMESTAMP(3) NOT NULL,

    CONSTRAINT "Repo_pkey" PRIMARY KEY ("name")
);

-- CreateTable
CREATE TABLE "RepoChange" (
    "id" TEXT NOT NULL,
    "repo" TEXT NOT NULL,
    "request" TEXT NOT NULL,
    "baseBranch" TEXT NOT NULL,
    "baseSha" TEXT,
    "phase" TEXT NOT NULL,
    "status" TEXT NOT NULL,
    "requestedBy" TEXT NOT NULL,
    "requestedByName" TEXT NOT NULL,
    "platform" TEXT,
    "account" TEXT,
    "chatId" TEXT,
    "sessionId" TEXT,
    "question" TEXT,
    "draft" TEXT,
    "taskState" TEXT,
    "report" TEXT,
    "plan" TEXT,
    "planHash" TEXT,
    "patchHash" TEXT,
    "transcriptHash" TEXT,
    "verdict" TEXT,
    "result" TEXT,
    "error" TEXT,
    "workflowId" TEXT NOT NULL,
    "createdAt" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updatedAt" TIMESTAMP(3) NOT NULL,

    CONSTRAINT "RepoChange_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "ChangeSteer" (
    "id" SERIAL NOT NULL,
    "changeId" TEXT NOT NULL,
    "text" TEXT NOT NULL,
    "by" TEXT NOT NULL,
    "createdAt" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "ChangeSteer_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "RepoLock" (
    "repo" TEXT NOT NULL,
    "holder" TEXT NOT NULL,
    "expiresAt" TIMESTAMP(3) NOT NULL,
    "createdAt" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "RepoLock_pkey" PRIMARY KEY ("repo")
);

-- CreateIndex
CREATE INDEX "RepoChange_repo_createdAt_idx" ON "RepoChange"("repo", "createdAt");

-- CreateIndex
CREATE INDEX "RepoChange_platform_account_chatId_status_idx" ON "RepoChange"("platform", "account", "chatId", "status");

-- CreateIndex
CREATE INDEX "ChangeSteer_changeId_id_idx" ON "ChangeSteer"("changeId", "id");
